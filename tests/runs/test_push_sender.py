"""The live push's sender (runs.domain.live_push._Sender): a process's pushes leave one after
another in the order they were handed over, and a failed send drops the events queued
behind it (their streams read the log) but never a stream's close."""

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from channels.layers import InMemoryChannelLayer

from runs.domain import push as live_push


class Layer(InMemoryChannelLayer):
    """The in-memory layer, whose first send takes a moment and, if asked, then fails."""

    def __init__(self, *, first_fails: bool = False) -> None:
        super().__init__()
        self.first_fails = first_fails
        self.sent: list[int] = []

    async def group_send(self, group: str, message: dict) -> None:
        if message["n"] == 0:
            await asyncio.sleep(0.1)  # the rest is handed over meanwhile
            if self.first_fails:
                raise ConnectionError("the layer is down")
        self.sent.append(message["n"])


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def push(n: int, kind: str = "harbor.events") -> dict:
    return {"type": kind, "n": n}


def test_pushes_leave_one_after_another_in_the_order_they_were_handed_over(loop):
    layer, sender = Layer(), live_push._Sender(loop)
    handed = threading.Barrier(4)

    def hand_over(start: int) -> None:
        handed.wait()
        for n in range(start, start + 25):
            sender.put([(layer, "tenant.1", push(n))])

    sender.put([(layer, "tenant.1", push(0))])
    threads = [threading.Thread(target=hand_over, args=(start,)) for start in (1, 26, 51, 76)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sender.idle.wait(5)
    assert sorted(layer.sent) == list(range(101))
    assert layer.sent[0] == 0
    for start in (1, 26, 51, 76):  # each thread's pushes in its own order
        mine = [n for n in layer.sent if start <= n < start + 25]
        assert mine == list(range(start, start + 25))


def test_a_failed_send_drops_the_events_behind_it_but_not_a_close(loop, monkeypatch):
    monkeypatch.setattr(live_push, "_push_paused_until", 0.0)
    layer, sender = Layer(first_fails=True), live_push._Sender(loop)
    sender.put([(layer, "tenant.1", push(0))])
    sender.put([(layer, "tenant.1", push(1)), (layer, "user.7", push(2, "harbor.close")), (layer, "tenant.1", push(3))])
    assert sender.idle.wait(5)
    assert layer.sent == [2]
    assert live_push._push_paused_until > time.monotonic()  # and the next pushes wait a moment


def test_a_push_to_a_closed_loop_leaves_the_sender_usable():
    loop = asyncio.new_event_loop()
    loop.close()
    sender = live_push._Sender(loop)
    with pytest.raises(RuntimeError):
        sender.put([(Layer(), "tenant.1", push(1))])
    assert sender.idle.is_set() and not sender.queue
