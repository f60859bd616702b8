"""The embedded executor's wake-ups: one wake-up sets one worker thread draining."""

import threading
import time

from runs.runtime import dispatch


def test_one_wake_up_sets_one_worker_thread_draining(monkeypatch):
    drained: list[str] = []
    first = threading.Event()

    def drain() -> int:
        drained.append(threading.current_thread().name)
        first.set()
        return 0

    monkeypatch.setattr(dispatch, "drain", drain)
    pool = dispatch._LocalPool(4, interval=60)  # no periodic look within the test
    pool.start()
    try:
        pool.wake()
        assert first.wait(10)
        time.sleep(0.3)  # a second thread woken by the same wake-up would have drained by now
        assert len(drained) == 1, drained
        pool.wake()
        pool.wake()
        deadline = time.monotonic() + 10
        while len(drained) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(drained) == 3
    finally:
        pool.stop()
    assert not any(thread.name.startswith("harbor-worker-") for thread in pool._threads if thread.is_alive())
