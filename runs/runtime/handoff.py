"""Started and decided runs handed straight to a worker of this process.

Where the workers live in this process (the embedded pool, while it runs; the manual
executor of tests and benchmarks), the start that creates a run, and the decision that
makes a parked run ready, take the run's lease in their own transaction and open the next
step there (`loop.claim_here`: a pending run started, an approved call's attempt opened).
After the commit a worker goes on from that step: no look, no claim and no transaction of
its own to begin. The claim follows the dispatcher's rule (ready, free, the tenant under
its share of workers); a run it does not take is left to a worker's look, woken as before.

What is handed lives in this process only: if the process dies, the lease lapses and any
worker takes the run again, as after a crash anywhere in a step. A handed step is in flight
from the commit that handed it (its `tool.invoked` is in the log): carried at once (within
FRESH_SECONDS), it goes on from the run as that commit left it, and steering that lands
after the commit meets it as it meets any step in flight, at its next boundary (a hard
cancel interrupts a call). A step handed longer ago renews the lease and reads the run back
first (in one UPDATE): one whose lease was lost meanwhile (another worker took the run) is
dropped, and steering that reached the run while it waited (a cancel racing the approval,
or cascading to a child just started) is applied by the boundary first: a call's attempt is
settled interrupted, its body never begun, and a planner is not asked."""

import logging
import threading
import time
from collections import deque
from functools import partial

from django.conf import settings
from django.db import transaction

from runs.domain import events
from runs.domain.connection_loss import once_more_if_lost
from runs.models import Run, ToolCallOutcome

from . import loop
from .execution import Call
from .lease import Lease
from .ledger import settle_attempt
from .wake import wake_now, wake_on_commit

log = logging.getLogger("harbor.runtime")

# A hand-off carried this soon after the claim in its commit needs no read of the run first.
FRESH_SECONDS = 0.1

_handed: deque[tuple[Lease, loop.Next]] = deque()  # appends and pops are atomic across threads
# Set while the embedded pool's threads run in this process (a command or a shell with the
# thread executor has none: its decisions are left to a server's look).
pool_running = threading.Event()


def _drained_here() -> bool:
    executor = settings.HARBOR_EXECUTOR
    return settings.HARBOR_HANDOFF and (executor == "manual" or (executor == "thread" and pool_running.is_set()))


def continue_here(run: Run) -> None:
    """Called under the run lock by the transaction that made `run` ready again (or that
    creates it): hand it to a worker of this process, or wake the workers to look. Only a
    transaction whose commit is the database's own hands off (one inside another, as a
    test's, leaves it to a look): what is handed goes to the workers after that commit."""
    conn = transaction.get_connection()
    taken = loop.claim_here(run) if _drained_here() and len(conn.atomic_blocks) == 1 else None
    if taken is None:
        wake_on_commit()
    elif taken[1] is not None:
        transaction.on_commit(partial(_hand, *taken))


def _hand(lease: Lease, step: loop.Next) -> None:
    _handed.append((lease, step))
    wake_now()


def carry_handed(limit: int | None = None) -> list[Lease]:
    """Carry the steps handed to this process (up to `limit`); the leases carried."""
    carried: list[Lease] = []
    while limit is None or len(carried) < limit:
        try:
            lease, step = _handed.popleft()
        except IndexError:
            break
        try:
            # Its lease was written with the commit that handed it (a commit whose answer was
            # lost is judged first, which may take seconds).
            if time.monotonic() - lease.written < min(FRESH_SECONDS, settings.HARBOR_LEASE_SECONDS / 3):
                run: Run | None = lease.as_handed()
            else:
                run = once_more_if_lost(lease.renew_reading)  # a renewal may be made twice
            if run is None:
                log.warning("run %s: its hand-off lost the lease meanwhile; the new holder goes on", lease.run_id)
                continue
            loop.carry(lease, partial(_begin, lease, step, run))
        except Exception:  # the run is gone (its tenant was deleted): the next hand-off goes on
            log.exception("run %s: its hand-off could not go on", lease.run_id)
        carried.append(lease)
    return carried


def _begin(lease: Lease, step: loop.Next, run: Run) -> loop.Next:
    """The handed step, unless steering reached the run before it began (a cancel cascading
    to a child just started, one racing an approval): then the boundary applies it first, as
    a claim's would, and a call's attempt is settled interrupted, its body never begun."""
    if run.steering_pending or run.hard_cancel:
        if isinstance(step, Call):
            settle_attempt(step.attempt, ToolCallOutcome.INTERRUPTED, "steering arrived before the call began")
        with events.atomic():
            return loop.at_boundary(lease, lease.locked_run())
    return step


def forget_handed() -> None:
    """Drop what was handed and not carried (a test's runtime, reset between tests)."""
    _handed.clear()
