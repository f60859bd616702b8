"""A worker's lease on a run, for one step: taken by one guarded UPDATE, kept alive by the
process's keeper thread while a planner or tool works, checked (fenced) before anything is
recorded or any side effect starts, and given back as the step ends. The worker id is unique
per claim, so it doubles as the fencing token: a worker whose lease was taken can never
match it again."""

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from runs.domain import events, sql
from runs.domain.connection_loss import retry_once_if_lost, was_lost
from runs.domain.transitions import save_run
from runs.models import Run, RunStatus

from .wake import wake_on_commit

log = logging.getLogger("harbor.runtime")

T = TypeVar("T")

READY = (RunStatus.PENDING, RunStatus.RUNNING)  # a run a step may be taken of (as runs.domain.sql spells it)
SLOW_WORK_SECONDS = 1.0  # a planner or tool body this long gives its connection back to the pool
# A worker's transaction whose connection was lost is made again this many times, waiting
# a little longer each time (a restart, a failover), before the step is left to the lease.
LOST_CONNECTION_RETRIES = 5


def lease_length() -> timedelta:
    return timedelta(seconds=settings.HARBOR_LEASE_SECONDS)


def lock_run(run_id: str) -> Run:
    """The run under its row lock (Run.objects.locked)."""
    return Run.objects.locked().get(pk=run_id)


class LeaseLost(Exception):
    """This worker no longer holds the run: another worker (or nobody) does."""


@dataclass(frozen=True)
class Landed(Generic[T]):
    """What a transaction whose answer was lost had done, found on the run as committed."""

    value: T


class Lease:
    def __init__(self, run_id: str, worker: str) -> None:
        self.run_id, self.worker = run_id, worker
        self.lost = threading.Event()
        self.written = time.monotonic()  # when this worker last set the lease's expiry
        self.given_back = False  # a committed transaction of the step released the run

    def claim(self) -> bool:
        """Take the run for a step if it is claimable, in one guarded UPDATE. Made again
        after a lost answer, a claim that landed finds the run already this worker's."""
        now, written = timezone.now(), time.monotonic()
        taken = sql.claim(self.run_id, self.worker, now, now + lease_length())
        if taken:
            self.written = written
        return taken

    def hold(self, run: Run) -> Run:
        """Check, under the run's lock, that this worker still holds it (a run that ended
        meanwhile is returned as it is: the caller stops there). A lease past half its length
        is renewed with the lock held."""
        if run.is_terminal:
            return run
        if run.lease_owner != self.worker:
            self.lost.set()
            raise LeaseLost(self.run_id)
        now = timezone.now()
        if run.lease_expires_at is None or run.lease_expires_at - now < lease_length() / 2:
            run.lease_expires_at, self.written = now + lease_length(), time.monotonic()
            run.save(update_fields=["lease_expires_at"])
        return run

    def transact(self, work: Callable[[Run], T], landed: Callable[[Run], Landed[T] | None] | None = None) -> T:
        """`work` on the run, under its lock and this worker's lease, in a service transaction.
        A connection lost on the way (even during the COMMIT, whose answer never came) has it
        made again on a new connection: the run's lock waits out a transaction still on its
        way, and `landed` (asked first, on the run as committed) answers what the earlier try
        left if it did land, from the keys it wrote, which were made before it ran."""
        for tries_left in range(LOST_CONNECTION_RETRIES, -1, -1):
            try:
                with events.atomic():
                    run = lock_run(self.run_id)
                    if tries_left < LOST_CONNECTION_RETRIES and landed is not None:
                        found = landed(run)
                        if found is not None:
                            return found.value
                    done = work(self.hold(run))
                self.given_back = run.lease_owner != self.worker  # parked, ended or queued: released
                return done
            except (OperationalError, InterfaceError) as error:
                if not tries_left or not was_lost(error):
                    raise
                log.warning("run %s: the database connection was lost (%s); made again", self.run_id, error)
                connection.close()
                time.sleep(0.1 * 2 ** (LOST_CONNECTION_RETRIES - tries_left))
        raise AssertionError("unreachable")

    def renew(self) -> bool:
        written = time.monotonic()
        renewed = Run.objects.filter(pk=self.run_id, lease_owner=self.worker).update(
            lease_expires_at=timezone.now() + lease_length()
        )
        if renewed:
            self.written = written
        else:
            self.lost.set()
        return bool(renewed)

    def fence(self) -> None:
        """Raise unless this worker still holds the run (a live database check, made once
        more on a new connection if its own was lost)."""
        held = Run.objects.filter(pk=self.run_id, lease_owner=self.worker)
        if self.lost.is_set() or not retry_once_if_lost(held.exists):
            self.lost.set()
            raise LeaseLost(self.run_id)

    def release(self) -> None:
        """Give the run back, unless the step's own transaction did (idempotent)."""
        if self.given_back:
            return
        Run.objects.filter(pk=self.run_id, lease_owner=self.worker).update(lease_owner="", lease_expires_at=None)

    @contextlib.contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Renew the lease every third of its length while the body runs, so a slow planner
        or tool (an LLM, a deploy, a remote agent) keeps its run. One keeper thread per
        process renews every working lease: entering costs no thread. A body that took a
        while gives this thread's pooled connection back: the next transaction takes one the
        pool checks, not one the server may have dropped meanwhile."""
        _keeper.keep(self, settings.HARBOR_LEASE_SECONDS / 3)
        began = time.monotonic()
        try:
            yield
        finally:
            _keeper.drop(self)
            slow = time.monotonic() - began >= SLOW_WORK_SECONDS
            if slow and not connection.in_atomic_block:
                connection.close()


def give_back(run: Run, after: timedelta = timedelta(0)) -> None:
    """In the transaction that ends a step of a run that goes on: the run is released and
    queued behind the runs already waiting (its priority first), `after` from now (a step
    put off; the sweep's look finds it then)."""
    run.lease_owner, run.lease_expires_at, run.queued_at = "", None, timezone.now() + after
    save_run(run)
    if not after:
        wake_on_commit()  # another worker may take it while this one looks for more


class _Keeper:
    """The process's lease renewer: one daemon thread, woken when a renewal falls due."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._due: dict[Lease, tuple[float, float]] = {}  # lease -> (next renewal, interval)
        self._wakes_at = float("inf")  # when the thread next looks, unless notified
        self._thread: threading.Thread | None = None

    def keep(self, lease: Lease, interval: float) -> None:
        with self._changed:
            at = max(lease.written + interval, time.monotonic())
            self._due[lease] = (at, interval)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="harbor-lease-keeper", daemon=True)
                self._thread.start()
            if at < self._wakes_at:  # sooner than it will look on its own
                self._changed.notify()

    def drop(self, lease: Lease) -> None:
        with self._changed:
            self._due.pop(lease, None)

    def _run(self) -> None:
        while True:
            with self._changed:
                if not self._due:
                    connection.close()  # idle: hold no database connection
                now = time.monotonic()
                due = [lease for lease, (at, _) in self._due.items() if at <= now]
                if not due:
                    idle = now + settings.HARBOR_LEASE_SECONDS / 3
                    self._wakes_at = min((at for at, _ in self._due.values()), default=idle)
                    self._changed.wait(self._wakes_at - now)
                    self._wakes_at = 0.0  # awake: a keep() meanwhile need not notify
                    continue
                for lease in due:
                    self._due[lease] = (now + self._due[lease][1], self._due[lease][1])
            for lease in due:
                self._renew(lease)

    def _renew(self, lease: Lease) -> None:
        try:
            renewed = retry_once_if_lost(lease.renew)  # a renewal may be made twice
        except Exception as error:  # the database is unreachable: the fence decides later
            log.warning("lease renewal for run %s failed (%s)", lease.run_id, error)
            connection.close()
            return
        if not renewed:
            log.warning("worker %s lost its lease on run %s", lease.worker, lease.run_id)
            self.drop(lease)


_keeper = _Keeper()
