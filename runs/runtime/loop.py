"""The run loop: one step of a run per claim.

A step is the unit of scheduling: a worker takes a ready run's lease, takes one step, and
gives the run back, queued behind the runs already waiting (its priority first). So a run
holds a worker only while its step works, and a tenant's share of workers counts steps in
flight, not runs alive. A step is:

1. the boundary (run lock): start a pending run, apply pending steering, restore the tool
   context; a pending call (an approved one, or one a dead worker left) is dispatched at once;
2. else the planner, asked outside any transaction while the keeper renews the lease, and
   the dispatch of its decision (run lock): finish, park, gate, or persist the call as
   pending and open its attempt in the tool-call ledger;
3. the tool body, outside any transaction, with the step's idempotency key, and the record
   of its outcome (run lock), which gives the run back (runtime/execution).

Every key a transaction writes (a tool-call attempt's id) is made before it first runs, so a
transaction whose answer was lost is made again and recognises what it left (Lease.transact):
a tool body runs once per attempt, and a second attempt exists only after its worker died."""

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import InterfaceError, OperationalError, connection

from runs.domain import events
from runs.domain.arguments import arguments_problems
from runs.domain.connection_loss import retry_once_if_lost
from runs.domain.event_types import PlannerDecision, TaskStarted, ToolInvoked
from runs.domain.transitions import move, run_complete, run_fail, save_run
from runs.kernel.errors import ErrToolContextLost
from runs.kernel.ids import new_ulid
from runs.models import FailureCode, Run, RunStatus, ToolCall, ToolCallOutcome

from .execution import Call, execute
from .lease import READY, Landed, Lease, LeaseLost, lock_run
from .ledger import lose_dead_attempt, open_attempt
from .parking import gate_needed, gate_policy, park, park_for_gate, park_for_operator
from .planner import Decision, Finish, PlannerView, RequestPause, describe
from .registry import get_agent
from .steering import steering_apply_pending
from .tools import ToolContext

log = logging.getLogger("harbor.runtime")

# A step whose planner's decision met new steering asks again, at most this often.
MAX_ASKS_PER_STEP = 3


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


def advance(run_id: str, worker: str | None = None, *, steps: int | None = None) -> int:
    """Take the run if it is claimable, and its steps while no other run waits its turn (at
    most `steps`): how many steps this worker took."""
    lease = Lease(run_id, worker or new_worker_id())
    if not retry_once_if_lost(lease.claim):
        return 0
    taken = 0
    try:
        held = None
        while taken == 0 or (held is not None and (steps is None or taken < steps)):
            taken += 1
            held = _step(lease, held)
    except LeaseLost:
        log.warning("run %s: worker %s lost its lease; the new holder goes on", run_id, lease.worker)
    except (OperationalError, InterfaceError) as error:
        # The database, not the run: unreachable, the connection lost, a deadlock. The run is
        # released (or its lease lapses) and taken again, as after a crash, never failed for it.
        log.warning("run %s: the database failed the step (%s); the run is taken again", run_id, error)
        _drop_connection()
    except Exception as error:  # a bug in a planner or the runtime fails the run loudly
        log.exception("run %s crashed", run_id)
        _end(lease, partial(_crashed, f"{type(error).__name__}: {error}"))
    finally:
        try:
            lease.release()  # unless the step's last transaction did
        except (OperationalError, InterfaceError):
            log.warning("run %s: its lease could not be released; it lapses", run_id)
            _drop_connection()
    return taken


def _step(lease: Lease, held: Run | None) -> Run | None:
    """One step of the run: `held`, the run as this worker's last step left it (None: read
    it under its lock). The run as this step left it when the worker goes on with it."""
    attempt_id = new_ulid()  # the key of the attempt this step may open, made before any try
    landed = partial(_landed, lease, attempt_id)
    step: Next = _planners_turn(held) if held is not None else None
    if step is None:
        step = lease.transact(partial(_boundary, lease, attempt_id), landed)
    asks = 0
    while isinstance(step, Boundary) and asks < MAX_ASKS_PER_STEP:
        asks += 1
        with lease.heartbeat():
            decision = get_agent(step.agent_id).planner().decide(step.view)
        step = lease.transact(partial(_dispatch, lease, step, decision, attempt_id), landed)
    return execute(lease, step) if isinstance(step, Call) else None


def _planners_turn(run: Run) -> Boundary | None:
    """The planner's turn on the run as this worker's last step committed it, when nothing
    needs its lock first (no steering waits, no call is pending): the dispatch re-checks under
    the lock what came meanwhile. None: the boundary is taken under the lock."""
    if run.status != RunStatus.RUNNING or run.steering_pending or run.checkpoint.get("pending_call") is not None:
        return None
    try:
        return _planner_view(run, _context(run))
    except ErrToolContextLost:
        return None


def _drop_connection() -> None:
    """Give up this thread's connection after a database error (the next statement takes a
    checked one), unless a caller's transaction still holds it."""
    if not connection.in_atomic_block:
        connection.close()


def _crashed(message: str, run: Run) -> None:
    run_fail(run, FailureCode.RUNTIME_ERROR, message)


def _end(lease: Lease, finish: Callable[[Run], object]) -> None:
    """End a run whose step crashed, unless another worker holds it now."""
    with events.atomic():
        run = lock_run(lease.run_id)
        if not run.is_terminal and run.lease_owner in ("", lease.worker):
            finish(run)


def _landed(lease: Lease, attempt_id: str, run: Run) -> Landed[Next] | None:
    """What an earlier try of this step's transaction left, if it landed: the attempt it
    opened (its body goes on), or a run it parked or ended, or that moved on without this
    worker (the step stops). None: nothing of it landed, it is made again."""
    attempt = ToolCall.objects.filter(pk=attempt_id).first()
    if attempt is not None:
        return Landed(_call_of(run, attempt) if attempt.outcome == ToolCallOutcome.RUNNING else None)
    if run.status not in READY or run.lease_owner != lease.worker:
        return Landed(None)
    return None


def _boundary(lease: Lease, attempt_id: str, run: Run) -> Next:
    """A step's start (run lock held): a pending run starts; pending steering applies; then
    the pending call, or the planner's turn."""
    if run.status == RunStatus.PENDING:
        move(run, RunStatus.RUNNING)
        events.emit(
            run=run,
            type=events.TASK_STARTED,
            payload=TaskStarted(TaskID=run.pk, Priority=run.priority, ParentTaskID=run.parent_id),
        )
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
        ctx = _context(run)
    except ErrToolContextLost as lost:
        run_fail(run, FailureCode.TOOL_CONTEXT_LOST, lost.message)
        return None
    pending = run.checkpoint.get("pending_call")
    if pending is not None:
        return _call(lease, run, ctx, run.checkpoint.get("step", 0), pending, attempt_id)
    return _planner_view(run, ctx)


def _context(run: Run) -> ToolContext:
    """The run's tool context as its checkpoint keeps it, with the decision that resumed it
    (raises ErrToolContextLost: a live handle is not in this process)."""
    ctx = ToolContext.restore(run.pk, run.checkpoint.get("tool_context"))
    ctx.resumed = run.checkpoint.get("resolution")
    return ctx


def _planner_view(run: Run, ctx: ToolContext) -> Boundary:
    checkpoint = run.checkpoint
    step = checkpoint.get("step", 0)
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
    return Boundary(agent_id=run.agent_id, step=step, ctx=ctx, view=view)


def _dispatch(lease: Lease, boundary: Boundary, decision: Decision, attempt_id: str, run: Run) -> Next:
    """Act on the planner's decision (run lock held), unless the run moved on meanwhile;
    steering that arrived while the planner thought is applied first, and the planner asked
    again. So is it if steering changed what the planner saw: an earlier try of this
    transaction, whose answer was lost, applied it."""
    if run.status != RunStatus.RUNNING or run.checkpoint.get("step", 0) != boundary.step:
        return None
    if run.steering_pending or _unseen(boundary.view, run):
        return _boundary(lease, attempt_id, run)
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
    pending = {"tool": decision.tool, "args": decision.args, "step": step, "attempts": 0}
    return _call(lease, run, ctx, step, pending, attempt_id)


def _unseen(view: PlannerView, run: Run) -> bool:
    """Whether steering applied since the planner was asked changed what it sees."""
    return (view.goal, view.context, view.messages) != (run.goal, run.context, run.messages)


def _call(lease: Lease, run: Run, ctx: ToolContext, step: int, pending: dict[str, Any], attempt_id: str) -> Next:
    """Persist the call as pending and open its attempt (run lock held), or park it at its
    gate. The body runs after the commit."""
    tool = get_agent(run.agent_id).tools.get(pending["tool"])
    if tool is None:
        run_fail(run, FailureCode.RUNTIME_ERROR, f"the planner called unknown tool {pending['tool']!r}")
        return None
    problems = arguments_problems(tool.arguments, pending["args"]) if tool.arguments else {}
    if problems:
        # Never a gate, nor a call, on arguments the tool does not take.
        listed = "; ".join(f"{field}: {problem}" for field, problem in problems.items())
        run_fail(run, FailureCode.RUNTIME_ERROR, f"the planner called {tool.name} with invalid arguments: {listed}")
        return None
    run.checkpoint = {**run.checkpoint, "pending_call": pending}
    outcome = gate_policy(run, tool, pending["args"])
    if gate_needed(outcome, tool, pending["args"]) and not pending.get("approved"):
        park_for_gate(run, ctx, tool, pending["args"], outcome)
        return None
    attempt = open_attempt(run, tool, step, lease.worker, attempt_id)
    run.checkpoint = {**run.checkpoint, "pending_call": {**pending, "attempts": attempt.attempt}}
    save_run(run)
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


def _call_of(run: Run, attempt: ToolCall) -> Call:
    """The call an attempt opened by a landed transaction is of, rebuilt from the run."""
    tool = get_agent(run.agent_id).tools[attempt.tool]
    return Call(
        tool=tool, args=run.checkpoint["pending_call"]["args"], step=attempt.step, ctx=_context(run), attempt=attempt
    )
