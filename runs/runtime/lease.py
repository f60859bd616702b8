"""A worker's lease on a run: claimed under the run's row lock in the transaction that starts
its first step, kept alive by the process's keeper thread while a planner or tool works, and
checked (fenced) before anything is recorded or any side effect starts. The worker id is
unique per claim, so it doubles as the fencing token: a worker whose lease expired and was
taken can never match it again."""

import contextlib
import copy
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from runs.domain import events
from runs.domain.connection_loss import atomic_surviving_loss, once_more_if_lost
from runs.domain.rows import RUNS, Beside
from runs.models import Run, RunStatus

log = logging.getLogger("harbor.runtime")

T = TypeVar("T")

READY = (RunStatus.PENDING, RunStatus.RUNNING)

# A claimable run, in SQL: ready, and free or its holder's lease expired (the holder died).
# Used by the claim's UPDATE (on one run, under its row lock) and the dispatcher's look;
# its one parameter: the time. The statuses are literals, so a prepared statement's generic
# plan can still use the partial index of ready runs (run_ready_order), whose condition
# they must match.
CLAIMABLE_SQL = f"status IN {tuple(str(status) for status in READY)} AND (lease_owner = '' OR lease_expires_at < %s)"
_CLAIMABLE = f"id = %s AND {CLAIMABLE_SQL}"
# Whether a run other than the one named is claimable, its tenant's share aside (asked as
# the transaction that releases the named run ends, whose lease may still count there); its
# parameters: the time and the run.
_READY_ELSEWHERE = f"SELECT EXISTS (SELECT 1 FROM {Run._meta.db_table} WHERE {CLAIMABLE_SQL} AND id <> %s)"


def under_cap_sql(tenant: str) -> str:
    """The tenant (`tenant`: SQL for its id, such as a row's column) holds fewer live leases
    than its share of workers (HARBOR_TENANT_MAX_RUNNING), walking the partial index
    run_leased; its parameters: those of `tenant`, the time and the share."""
    return f"""(SELECT COUNT(*) FROM {Run._meta.db_table} AS held
           WHERE held.tenant_id = {tenant} AND NOT (held.lease_owner = '')
             AND held.lease_expires_at >= %s) < %s"""


_UNDER_CAP = under_cap_sql(f"{Run._meta.db_table}.tenant_id")


def lock_checking_share(*, lock: bool = True, **where: object) -> Run | None:
    """The run under its row lock (RUNS.lock), with whether its tenant is under its share
    of workers read in the same statement: a `claim_along` later in the transaction (a
    decision handing the run to a worker) then needs no statement of its own. `lock=False`:
    read, not locked (a decision made on the run as read: `guard_as_read`)."""
    read = RUNS.lock_reading if lock else RUNS.get_reading
    expression, params = _share()
    found = read(expression, params, **where)
    return None if found is None else _with_share(*found)


def read_checking_share(beside: Beside, **where: object) -> tuple[Run, Any] | None:
    """`lock_checking_share(lock=False)`, and the row `beside` names (None when there is
    none), read in the same statement: a decision's run and its pause in one round trip."""
    expression, params = _share()
    found = RUNS.get_reading_beside(expression, params, beside, **where)
    return None if found is None else (_with_share(*found[:2]), found[2])


def _share() -> tuple[str, list[object]]:
    """The run's tenant under its share of workers, as an expression read with the run."""
    return _UNDER_CAP, [connection.ops.adapt_datetimefield_value(timezone.now()), settings.HARBOR_TENANT_MAX_RUNNING]


def _with_share(run: Run, under: object) -> Run:
    run.__dict__[_UNDER_CAP_AT_LOCK] = bool(under)
    return run


_UNDER_CAP_AT_LOCK = "_harbor_under_cap_at_lock"  # on a run instance: read with its lock


_HELD = "id = %s AND lease_owner = %s AND lease_expires_at >= %s"

SLOW_WORK_SECONDS = 1.0  # a planner or tool body this long gives its connection back to the pool


class LeaseLost(Exception):
    """This worker no longer holds the run: another worker (or nobody) does."""


class ShareHeld(Exception):
    """The start that took its new run for a worker (`claim_along`) found, as it committed,
    its tenant holding its share of workers: nothing of it landed. It is made again,
    leaving the run to a worker's look."""


class RunMoved(Exception):
    """The run is no longer as this worker last left it (steering arrived, the lease lapsed,
    the run ended): what was made on that row is undone, and made again under its lock."""


def guard_as_read(run: Run) -> None:
    """Write the run, read without its lock, only while it stands as read: the same status,
    no steering waiting, written by no one since (its updated_at). Otherwise nothing of the
    transaction lands and RunMoved is raised: the caller makes it again under the run's
    lock. A run read with steering waiting raises it at once: the boundary that applies it
    (a decision's hand-off) must see every instruction, which only the lock guarantees."""
    if run.steering_pending or run.hard_cancel:
        raise RunMoved(run.pk)
    _guard(run)


def _guard(run: Run, also: str = "", params: tuple[object, ...] = ()) -> None:
    """The run's write at the transaction's end, guarded by `_AS_READ` (and `also`, SQL
    over its columns, with `params`). The keeper's lease renewals leave updated_at alone;
    anyone else who changes what a transaction relies on sets one of these."""
    adapt = connection.ops.adapt_datetimefield_value
    condition: tuple[str, list[object]] = (_AS_READ + also, [run.status, adapt(run.updated_at), *params])
    events.guard_at_end(RUNS, run, condition, RunMoved(run.pk))


_AS_READ = "status = %s AND NOT steering_pending AND NOT hard_cancel AND updated_at = %s"


def lease_length() -> timedelta:
    return timedelta(seconds=settings.HARBOR_LEASE_SECONDS)


class Lease:
    def __init__(self, run_id: str, worker: str) -> None:
        self.run_id, self.worker = run_id, worker
        self.lost = threading.Event()
        self.run: Run | None = None  # the row as this worker's latest transaction left it
        self.known = False  # `run` is the row as committed: the next transaction may build on it (held_run)
        self.written = time.monotonic()  # when this worker last set the lease's expiry
        # Its last transaction released the run, and no other run was ready as it committed:
        # the dispatcher's look would find nothing it was not woken for (ask_after).
        self.nothing_ready = False

    def claim_locked(self) -> Run | None:
        """Take the run if it is ready and free (or its holder's lease expired), inside the
        caller's transaction, in one UPDATE that locks, re-checks and writes; None if it is
        not. A row locked by another transaction is waited for, not skipped (a skipped run
        would wait for the next sweep); the database re-checks the rule once it is free."""
        now, written = timezone.now(), time.monotonic()
        run = RUNS.update_returning(
            _CLAIMABLE,
            [self.run_id, connection.ops.adapt_datetimefield_value(now)],
            lease_owner=self.worker,
            lease_expires_at=now + lease_length(),
        )
        if run is not None:
            self.run, self.written = run, written
            self._known_on_commit()
        return run

    def claim_along(self, run: Run) -> bool:
        """Take a run that the caller's transaction holds locked and made ready itself, so
        free (a parked run holds no lease), or is creating (no one else sees it yet): the
        lease is written with the run's own pending changes (in one UPDATE, or at the
        transaction's end when the share was read with the lock: `lock_checking_share`),
        only while its tenant is under its share of workers (the dispatcher's rule). False,
        and nothing written, when it is not. A run being created is inserted, lease and
        all, only while its tenant is under its share: if it is not, nothing of the
        transaction lands and ShareHeld is raised as it ends."""
        if run.status not in READY or run.lease_owner:
            return False
        now, written = timezone.now(), time.monotonic()
        run.lease_owner, run.lease_expires_at = self.worker, now + lease_length()
        at = connection.ops.adapt_datetimefield_value(now)
        under = run.__dict__.pop(_UNDER_CAP_AT_LOCK, None)
        if run._state.adding:  # inserted only while its tenant is under its share, or nothing lands
            share: tuple[str, list[object]] = (
                under_cap_sql("%s"),
                [run.tenant_id, at, settings.HARBOR_TENANT_MAX_RUNNING],
            )
            events.guard_at_end(RUNS, run, share, ShareHeld(run.pk))
            taken = True
        elif under is not None:  # read with the run's lock: the lease is written as the transaction ends
            taken = under
        else:
            taken = RUNS.update(run, only_if=(_UNDER_CAP, [at, settings.HARBOR_TENANT_MAX_RUNNING]))
        if not taken:
            run.lease_owner, run.lease_expires_at = "", None
            return False
        self.run, self.written = run, written
        return True

    def as_handed(self) -> Run:
        """The run as the committed transaction that took it for this worker left it
        (`claim_along`), for its worker to go on from (`held_run`): a copy, which the
        thread that committed it no longer shares."""
        assert self.run is not None, "taken by claim_along"
        self.run, self.known = copy.copy(self.run), True
        return self.run

    def renew_reading(self) -> Run | None:
        """Renew the lease and read the run back, in one UPDATE; None if this worker no
        longer holds an unexpired lease on it. A lease written less than a third of its
        length ago (the keeper's cadence) is only read: it holds for two thirds more, and
        the read still sees it taken or released meanwhile, with no write to wait for."""
        now, written = timezone.now(), time.monotonic()
        if written - self.written < settings.HARBOR_LEASE_SECONDS / 3:
            run = RUNS.get(pk=self.run_id)
            if run is None or run.lease_owner != self.worker or not run.lease_expires_at or run.lease_expires_at < now:
                self.lost.set()
                return None
            self.run, self.known = run, not connection.in_atomic_block
            return run
        run = RUNS.update_returning(
            _HELD,
            [self.run_id, self.worker, connection.ops.adapt_datetimefield_value(now)],
            lease_expires_at=now + lease_length(),
        )
        if run is None:
            self.lost.set()
        else:
            self.run, self.written, self.known = run, written, not connection.in_atomic_block
        return run

    def renew(self) -> bool:
        written = time.monotonic()
        renewed = Run.objects.filter(
            pk=self.run_id, lease_owner=self.worker, lease_expires_at__gte=timezone.now()
        ).update(lease_expires_at=timezone.now() + lease_length())
        if renewed:
            self.written = written
        else:
            self.lost.set()
        return bool(renewed)

    def fence(self) -> None:
        """Raise unless this worker still holds an unexpired lease (a live database check, made
        once more on a new connection if its own was lost)."""
        held = Run.objects.filter(pk=self.run_id, lease_owner=self.worker, lease_expires_at__gte=timezone.now())
        if self.lost.is_set() or not once_more_if_lost(held.exists):
            self.lost.set()
            raise LeaseLost(self.run_id)

    def locked_run(self) -> Run:
        """The run under its row lock, if this worker still holds an unexpired lease on it (the
        fence). A lease past half its length is renewed while the lock is held; a younger one
        needs no write (the heartbeat keeps it while a planner or tool works). `no_key`: the
        run's key never changes, so rows pointing at it (events, pauses) may still be inserted
        meanwhile."""
        run = RUNS.lock(pk=self.run_id)
        if run is None:
            raise Run.DoesNotExist(self.run_id)
        self.run = run
        self._known_on_commit()
        if run.is_terminal:
            return run  # ended meanwhile (a cancel, a rejection): the caller stops here
        now = timezone.now()
        if run.lease_owner != self.worker or run.lease_expires_at is None or run.lease_expires_at < now:
            self.lost.set()
            raise LeaseLost(self.run_id)
        if run.lease_expires_at - now < lease_length() / 2:
            run.lease_expires_at, self.written = now + lease_length(), time.monotonic()
            RUNS.update(run, ["lease_expires_at"])
        return run

    def held_run(self) -> Run:
        """The run as this worker's last committed transaction (or read) left it, not locked:
        the transaction writes it only while it still stands so (`_guard`), and when it does
        not, nothing of the transaction lands and RunMoved is raised (`transact` then makes it
        again on `locked_run`). Without such a row at hand, `locked_run`. Its lock, read and
        re-check then come with the transaction's closing write."""
        run = self.run
        if not self.known or run is None or run.status != RunStatus.RUNNING:
            return self.locked_run()
        if run.steering_pending or run.hard_cancel or run.lease_owner != self.worker:
            return self.locked_run()
        self.known = False  # until this transaction commits: its changes are made on the row
        now = timezone.now()
        if time.monotonic() - self.written >= settings.HARBOR_LEASE_SECONDS / 2:
            run.lease_expires_at, self.written = now + lease_length(), time.monotonic()
        # Still as it left it, and still its holder's.
        held = (self.worker, connection.ops.adapt_datetimefield_value(now))
        _guard(run, " AND lease_owner = %s AND lease_expires_at >= %s", held)
        self._known_on_commit()
        return run

    def transact(self, work: Callable[[Run], T]) -> T:
        """`work` on the run in one of this worker's transactions (kept through a lost
        connection: atomic_surviving_loss): on the row as it last left it (`held_run`), and
        once more under the run's lock if the row moved meanwhile."""

        def made(run: Run) -> T:
            done = work(run)
            self.ask_after(run)
            return done

        try:
            return atomic_surviving_loss(lambda: made(self.held_run()), run_id=self.run_id)
        except RunMoved:
            return atomic_surviving_loss(lambda: made(self.locked_run()), run_id=self.run_id)

    def ask_after(self, run: Run) -> None:
        """At the end of a transaction of this worker's on `run`: if it releases the run
        (parks or ends it), ask in its closing statement whether another run is ready
        (`events.ask_at_end`), and note a "no" once it has committed (`nothing_ready`)."""
        self.nothing_ready = False
        if run.lease_owner:
            return

        def told(ready: object) -> None:
            if not ready:
                transaction.on_commit(lambda: setattr(self, "nothing_ready", True))

        events.ask_at_end(_READY_ELSEWHERE, [connection.ops.adapt_datetimefield_value(timezone.now()), run.pk], told)

    def _known_on_commit(self) -> None:
        self.known = False
        run = self.run
        transaction.on_commit(lambda: setattr(self, "known", self.run is run))

    def release(self) -> None:
        RUNS.update_where({"pk": self.run_id, "lease_owner": self.worker}, lease_owner="", lease_expires_at=None)

    @contextlib.contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Renew the lease every third of its length while the body runs, so a slow planner
        or tool (an LLM, a deploy, a remote agent) keeps its run. The first renewal falls a
        third after the lease was last written, not after the body began: the steps before
        it may have taken part of the lease already. One keeper thread per process renews
        every working lease: entering costs no thread. A body that took a while gives this
        thread's pooled connection back: the next transaction takes one the pool checks, not
        one the server may have dropped meanwhile (a restart, a failover)."""
        _keeper.keep(self, settings.HARBOR_LEASE_SECONDS / 3)
        began = time.monotonic()
        try:
            yield
        finally:
            _keeper.drop(self)
            slow = time.monotonic() - began >= SLOW_WORK_SECONDS
            if slow and getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
                connection.close()


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
                    # Idle, it still looks once a renewal interval: a lease kept meanwhile falls
                    # due after that look, so keeping one (each tool and planner call) wakes no one.
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
            renewed = once_more_if_lost(lease.renew)  # a renewal may be made twice
        except (OperationalError, InterfaceError) as error:  # the database is unreachable: the fence decides later
            log.warning("lease renewal for run %s failed (%s)", lease.run_id, error)
            connection.close()
            return
        except Exception:
            log.exception("lease renewal for run %s failed", lease.run_id)
            connection.close()
            return
        if not renewed:
            log.warning("worker %s lost its lease on run %s", lease.worker, lease.run_id)
            self.drop(lease)


_keeper = _Keeper()
