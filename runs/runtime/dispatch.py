"""Who advances runs, in each topology.

The database is the queue: a ready run is one that is pending or running with no live
lease, and a worker takes one step of it at a time, highest priority first (then the one
waiting longest). A wake-up only says "look"; it carries no run id, so a duplicate or lost
wake-up is harmless and `prioritize` reorders queued work in both topologies.

- thread (embedded default): worker threads inside the web process, plus a sweeper.
- celery (production): a `dispatch` task per wake-up, and a beat-scheduled sweep.
- manual (tests): nothing runs until the test calls `drain()`.
"""

import logging
import threading
from collections.abc import Callable

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

import outbox
from approvals.domain.services import pause_sweep_overdue
from runs.domain import handles, sql

from . import loop
from .wake import register, wake_now

log = logging.getLogger("harbor.runtime")


def drain(*, limit: int | None = None) -> int:
    """Take steps of ready runs, highest priority first (then the longest waiting), until
    none is left (or `limit` steps): the number of steps taken."""
    steps = 0
    while limit is None or steps < limit:
        left = None if limit is None else limit - steps
        # The first one claimed takes its steps.
        taken = next((taken for pk in ready_ids() if (taken := loop.advance(pk, steps=left))), 0)
        if not taken:
            break
        steps += taken
    return steps


def ready_ids(limit: int = 20) -> list[str]:
    """Claimable runs in the order workers take them: priority, then the longest waiting,
    leaving out tenants already at their share of workers (HARBOR_TENANT_MAX_RUNNING steps in
    flight), so one busy tenant cannot hold every worker. The share is soft: workers claiming
    at the same instant may overshoot it by one each."""
    return sql.ready_run_ids(timezone.now(), settings.HARBOR_TENANT_MAX_RUNNING, limit)


def sweep() -> None:
    """Periodic: expire overdue pauses, and deliver what the outbox owes whose retry is due.
    Runs whose worker died become claimable when their lease expires; the wake-up after the
    sweep picks them up."""
    pause_sweep_overdue()
    outbox.deliver_due()
    handles.reap_ended()
    if ready_ids(limit=1):
        wake_now()


class _LocalPool:
    """Worker threads of the embedded default: each waits for a wake-up (or the sweep
    interval) and drains the queue."""

    def __init__(self, size: int, interval: float) -> None:
        self._size, self._interval = size, interval
        self._condition = threading.Condition()
        self._signals = 0
        self._started = False
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        with self._condition:
            if self._started:
                return
            self._started = True
            self._stopping.clear()
        self._threads = [
            threading.Thread(target=self._work, name=f"harbor-worker-{index}", daemon=True)
            for index in range(self._size)
        ]
        self._threads.append(threading.Thread(target=self._sweep, name="harbor-sweeper", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Let the threads finish what they hold and end (the benchmark's; a server's pool
        lives as long as its process)."""
        with self._condition:
            self._stopping.set()
            self._condition.notify_all()
        for thread in self._threads:
            thread.join()
        with self._condition:
            self._started = False

    def wake(self) -> None:
        """One wake-up wakes one thread: it drains until nothing is ready. Waking them all
        had every thread query and race for the same run, on the GIL the request that
        woke them still needs."""
        with self._condition:
            self._signals += 1
            self._condition.notify()

    def _work(self) -> None:
        while not self._stopping.is_set():
            with self._condition:
                timed_out = False
                if not self._signals and not self._stopping.is_set():
                    timed_out = not self._condition.wait(timeout=self._interval)
                if self._signals:
                    self._signals -= 1
                elif not timed_out:
                    continue  # woken, but another thread took the wake-up (or the pool stops)
            self._safely(drain)  # a wake-up, or the periodic look

    def _sweep(self) -> None:
        while not self._stopping.wait(self._interval):
            self._safely(sweep)

    @staticmethod
    def _safely(job: Callable[[], object]) -> None:
        try:
            job()
        except Exception:
            log.exception("embedded runtime job failed")
        finally:
            close_old_connections()


_local: _LocalPool | None = None
_local_lock = threading.Lock()


def local_pool() -> _LocalPool:
    global _local
    with _local_lock:
        if _local is None:
            _local = _LocalPool(settings.HARBOR_LOCAL_WORKERS, settings.HARBOR_SWEEP_SECONDS)
        return _local


def register_wakers() -> None:
    """Called once at app start: the embedded pool's waker (Celery's lives in runs.tasks)."""
    register("thread", lambda: local_pool().wake())


def start_local_runtime() -> None:
    """Start the embedded default's worker threads (called by the ASGI app)."""
    if settings.HARBOR_EXECUTOR == "thread":
        local_pool().start()
        wake_now()
