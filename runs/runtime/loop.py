"""The run loop: advance one claimed run a step at a time.

Each transaction holds the run lock and ends by preparing what comes next (the boundary),
so a step costs no transaction of its own beyond the work it does. The slow work runs
between them, outside any transaction, while the keeper renews the lease:

1. the claim (run lock): take the lease, start a pending run, then the boundary (a run of
   an inline planner takes its first boundary in the transaction that creates it, with no
   worker: `first_step`);
2. the boundary (end of every transaction that goes on): apply pending steering, restore
   the tool context; a pending call (an approved one, or one a dead worker left) is
   dispatched at once, else the planner is asked outside the transaction (an inline
   planner, one of rules, is asked right here and its decision dispatched in the same
   transaction);
3. the dispatch (run lock): fence and re-check the step, then finish, park, gate, or
   persist the call as pending and open its attempt in the tool-call ledger;
   the tool body then runs outside the transaction, with the step's idempotency key;
4. the record (run lock): fence and re-check the attempt, checkpoint the result, and
   the next boundary.

A pending call is persisted before its body starts, so a retry after a crash repeats the
same call rather than asking the planner again; a step recorded once is never run again.
The transaction that parks or ends the run releases the lease with it."""

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import InterfaceError, OperationalError, connection

from runs.domain import events
from runs.domain.errors import ErrToolContextLost
from runs.domain.event_types import (
    PlannerDecision,
    TaskStarted,
    ToolInvoked,
)
from runs.domain.rows import RUNS
from runs.domain.transitions import move, run_complete, run_fail
from runs.models import FailureCode, Run, RunStatus

from .execution import Call, execute
from .lease import Lease, LeaseLost
from .ledger import lose_dead_attempt, open_attempt
from .parking import park, park_for_gate, park_for_operator
from .planner import Decision, Finish, PlannerView, RequestPause, describe
from .registry import get_agent
from .steering import steering_apply_pending
from .tools import ToolContext

log = logging.getLogger("harbor.runtime")


def new_worker_id() -> str:
    return uuid.uuid4().hex


@dataclass
class Boundary:
    """A step about to ask the planner: what the dispatch re-checks."""

    agent_id: str
    step: int
    ctx: ToolContext
    view: PlannerView


Next = Boundary | Call | None  # what a transaction leaves to do: ask, call, or stop


def advance(run_id: str, worker: str | None = None) -> Lease | None:
    """Claim a run and advance it until it parks, ends or loses its lease: the lease it
    was claimed with, or None when the run was not there to claim (another worker holds
    it, or it is not ready)."""
    lease = Lease(run_id, worker or new_worker_id())

    def claim() -> Next:
        with events.atomic():
            run = lease.claim_locked()
            if run is None:
                return None
            if run.status == RunStatus.PENDING:
                move(run, RunStatus.RUNNING)
                _narrate_started(run)
            step = at_boundary(lease, run)
            lease.ask_after(run)
            return step

    return lease if carry(lease, claim) else None


def claim_here(run: Run) -> tuple[Lease, Next] | None:
    """In the transaction that made a parked run ready again (its row lock held), or that
    creates a run: take its lease for a worker of this process and go as far as the claim's
    transaction would (a pending run starts; the attempt of an approved call is opened
    here). None when its tenant holds its share of workers (a worker's look decides)."""
    lease = Lease(run.pk, new_worker_id())
    if not lease.claim_along(run):
        return None
    if run.status == RunStatus.PENDING:
        move(run, RunStatus.RUNNING)
        _narrate_started(run)
    step = at_boundary(lease, run)
    if step is None and run.lease_owner:
        lease.release()
    return lease, step


def carry(lease: Lease, first: Callable[[], Next]) -> bool:
    """Run `first` (what takes the lease, or the step a hand-off took it with), then each
    step after it until the run parks, ends or loses its lease. False when `first` took
    nothing."""
    ended = False
    try:
        step = first()
        if lease.run is None:
            return False
        while step is not None:
            step = execute(lease, step, at_boundary) if isinstance(step, Call) else _decide(lease, step)
        ended = True
    except LeaseLost:
        log.warning("run %s: worker %s lost its lease; the new holder goes on", lease.run_id, lease.worker)
    except (OperationalError, InterfaceError) as error:
        # The database, not the run: unreachable, the connection lost, a deadlock. Nothing of
        # the failed transaction landed; the run is released (or its lease lapses) and taken
        # again, as after a crash, never failed for it.
        log.warning("run %s: the database failed the step (%s); the run is taken again", lease.run_id, error)
        _drop_connection()
    except Exception as error:  # a bug in a planner or the runtime fails the run loudly
        log.exception("run %s crashed", lease.run_id)
        message = f"{type(error).__name__}: {error}"
        _end(lease, lambda run: run_fail(run, FailureCode.RUNTIME_ERROR, message))
    finally:
        if lease.run is not None and not (ended and not lease.run.lease_owner):
            try:
                lease.release()  # unless the committed transaction that parked or ended the run did
            except (OperationalError, InterfaceError):
                log.warning("run %s: its lease could not be released; it lapses", lease.run_id)
                _drop_connection()
    return True


def _drop_connection() -> None:
    """Give up this thread's connection after a database error (the next statement takes a
    checked one), unless a caller's transaction still holds it."""
    if not connection.in_atomic_block:
        connection.close()


def first_step(run: Run) -> None:
    """The first boundary of a new run of an inline planner, in the transaction that
    created it (RUNNING, so no one else has seen it): no worker, no lease. It goes as far as
    rules go (a park, the end, or a call persisted as pending) and leaves a call's attempt
    to the worker that claims the run."""
    _narrate_started(run)
    at_boundary(None, run)


def _narrate_started(run: Run) -> None:
    events.emit(
        run=run,
        type=events.TASK_STARTED,
        payload=TaskStarted(TaskID=run.pk, Priority=run.priority, ParentTaskID=run.parent_id),
    )


def _end(lease: Lease, finish: Callable[[Run], object]) -> None:
    with events.atomic():
        run: Run | None
        try:
            run = lease.locked_run()
        except LeaseLost:
            # A crash in the claim's own transaction undid the claim with it: take the run
            # again to end it, unless another worker holds it now. Left ready, it would be
            # claimed and crash again, forever.
            run = lease.claim_locked()
        if run is not None and not run.is_terminal:
            finish(run)


def _decide(lease: Lease, boundary: Boundary) -> Next:
    """Ask the planner (outside any transaction), then act on its decision."""
    with lease.heartbeat():
        decision = get_agent(boundary.agent_id).planner().decide(boundary.view)
    return _dispatch(lease, boundary, decision)


def at_boundary(lease: Lease | None, run: Run) -> Next:
    """What comes next for a run this worker holds (run lock held): pending steering first,
    then the pending call, or the planner's turn (an inline planner's decision, at once)."""
    if run.status != RunStatus.RUNNING:
        return None
    if run.steering_pending:
        attempts, step = (run.checkpoint.get("pending_call") or {}).get("attempts"), run.checkpoint.get("step", 0)
        stop = steering_apply_pending(run)
        if stop is not None and attempts:  # the call's last attempt may be a dead worker's: it stops here
            lose_dead_attempt(run, step, attempts)
        if stop == "cancel":
            return None
        if stop == "pause":
            park_for_operator(run)
            return None
    try:
        ctx = ToolContext.restore(run.pk, run.checkpoint.get("tool_context"))
    except ErrToolContextLost as lost:
        run_fail(run, FailureCode.TOOL_CONTEXT_LOST, lost.message)
        return None
    checkpoint = run.checkpoint
    step = checkpoint.get("step", 0)
    ctx.resumed = checkpoint.get("resolution")
    pending = checkpoint.get("pending_call")
    if pending is not None:
        return _call(lease, run, ctx, step, pending)
    view = PlannerView(
        run_id=run.pk,
        goal=run.goal,
        query=checkpoint.get("query", run.goal),
        step=step,
        history=list(checkpoint.get("history", [])),
        context=list(run.context),
        messages=list(run.messages),
        resumed=ctx.resumed,
    )
    boundary = Boundary(agent_id=run.agent_id, step=step, ctx=ctx, view=view)
    agent = get_agent(run.agent_id)
    if not agent.planner_inline:
        return boundary
    try:
        decision = agent.planner().decide(view)
    except Exception as error:  # as a crash of a planner asked outside: the run fails loudly
        log.exception("run %s: its inline planner failed", run.pk)
        run_fail(run, FailureCode.RUNTIME_ERROR, f"{type(error).__name__}: {error}")
        return None
    return _act(lease, run, boundary, decision)


def _dispatch(lease: Lease, boundary: Boundary, decision: Decision) -> Next:
    """Act on the planner's decision, on the run as this worker left it or under its lock
    (Lease.transact; its answer kept through a lost connection: the planner is not asked
    twice for it)."""

    def act(run: Run) -> Next:
        if run.status != RunStatus.RUNNING or run.checkpoint.get("step", 0) != boundary.step:
            return None
        if run.steering_pending:
            return at_boundary(lease, run)  # steering arrived while the planner thought: apply it first
        return _act(lease, run, boundary, decision)

    return lease.transact(act)


def _act(lease: Lease | None, run: Run, boundary: Boundary, decision: Decision) -> Next:
    """Narrate the planner's decision and carry it out (run lock held)."""
    step, ctx = boundary.step, boundary.ctx
    events.emit(run=run, type=events.PLANNER_DECISION, payload=PlannerDecision(Step=step, Decision=describe(decision)))
    if isinstance(decision, Finish):
        run_complete(run, decision.answer)
        return None
    if isinstance(decision, RequestPause):
        park(
            run,
            ctx,
            cause=decision.cause,
            reason=decision.reason,
            payload=decision.payload,
            summary=decision.summary,
            history_entry={"pause": decision.cause},
        )
        return None
    return _call(lease, run, ctx, step, {"tool": decision.tool, "args": decision.args, "step": step, "attempts": 0})


def _call(lease: Lease | None, run: Run, ctx: ToolContext, step: int, pending: dict[str, Any]) -> Call | None:
    """Persist the call as pending and open its attempt (run lock held), or park it at its
    gate. The body runs after the commit. With no lease (a first step), the call is only
    persisted: the worker that claims the run opens the attempt."""
    tool = get_agent(run.agent_id).tools.get(pending["tool"])
    if tool is None:
        run_fail(run, FailureCode.RUNTIME_ERROR, f"the planner called unknown tool {pending['tool']!r}")
        return None
    checkpoint = dict(run.checkpoint)
    checkpoint["pending_call"] = pending
    run.checkpoint = checkpoint
    if tool.needs_approval(pending["args"]) and not pending.get("approved"):
        park_for_gate(run, ctx, tool, pending["args"])
        return None
    # The pending call is written with the run as the transaction ends (one the checkpoint
    # holds already, approved or retried, is not written again); opening its attempt writes
    # the run there too, with the attempts' count.
    if lease is None:
        events.at_end(RUNS, run)
        return None
    attempt = open_attempt(run, tool, step, lease.worker)
    ctx.idempotency_key = attempt.idempotency_key
    events.emit(
        run=run,
        type=events.TOOL_INVOKED,
        payload=ToolInvoked(
            Tool=tool.name,
            Step=step,
            Args=pending["args"],
            Attempt=attempt.attempt,
            **tool.describe(pending["args"], ctx),
        ),
    )
    return Call(tool=tool, args=pending["args"], step=step, ctx=ctx, attempt=attempt)
