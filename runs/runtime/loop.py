"""The run loop: advance one claimed run a step at a time.

A step is three short transactions with the slow work between them, outside any
transaction, while a heartbeat keeps the lease:

1. the boundary (run lock): fence, apply pending steering, restore the tool context;
   the planner is then asked outside the transaction (unless a call is already pending);
2. the dispatch (run lock): fence and re-check the step, then finish, park, gate, or
   persist the call as pending and open its attempt in the tool-call ledger;
   the tool body then runs outside the transaction, with the step's idempotency key;
3. the record (run lock): fence and re-check the attempt, then checkpoint the result.

A pending call is persisted before its body starts, so a retry after a crash repeats the
same call rather than asking the planner again; a step recorded once is never run again."""

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runs.domain import events
from runs.domain.errors import ErrToolContextLost
from runs.domain.event_types import (
    PlannerDecision,
    TaskStarted,
    ToolInvoked,
)
from runs.domain.transitions import move, run_complete, run_fail
from runs.models import FailureCode, Run, RunStatus

from .execution import Call, execute
from .lease import Lease, LeaseLost
from .ledger import open_attempt
from .parking import park, park_for_gate, park_for_operator
from .planner import Decision, Finish, PlannerView, RequestPause, describe
from .registry import get_agent
from .steering import steering_apply_pending
from .tools import ToolContext

log = logging.getLogger("harbor.runtime")


def new_worker_id() -> str:
    return uuid.uuid4().hex


def claim(run_id: str, worker: str) -> bool:
    return Lease(run_id, worker).claim()


def advance(run_id: str, worker: str | None = None) -> bool:
    """Claim and advance a run until it parks, ends or loses its lease."""
    worker = worker or new_worker_id()
    if not claim(run_id, worker):
        return False
    advance_claimed(run_id, worker)
    return True


def advance_claimed(run_id: str, worker: str) -> None:
    lease = Lease(run_id, worker)
    try:
        while _step(lease):
            pass
    except LeaseLost:
        log.warning("run %s: worker %s lost its lease; the new holder goes on", run_id, worker)
    except Exception as error:  # a bug in a planner or the runtime fails the run loudly
        log.exception("run %s crashed", run_id)
        message = f"{type(error).__name__}: {error}"
        _end(lease, lambda run: run_fail(run, FailureCode.RUNTIME_ERROR, message))
    finally:
        lease.release()


@dataclass
class _Boundary:
    agent_id: str
    step: int
    ctx: ToolContext
    pending: dict[str, Any] | None
    view: PlannerView | None = None


def _end(lease: Lease, finish: Callable[[Run], object]) -> None:
    with events.atomic():
        try:
            run = lease.locked_run()
        except LeaseLost:
            return
        if not run.is_terminal:
            finish(run)


def _step(lease: Lease) -> bool:
    """One step. Returns True to go on with the next step."""
    boundary = _boundary(lease)
    if boundary is None:
        return False
    decision: Decision | None = None
    if boundary.view is not None:  # no call pending: the planner decides
        with lease.heartbeat():
            decision = get_agent(boundary.agent_id).planner().decide(boundary.view)
    call = _dispatch(lease, boundary, decision)
    return execute(lease, call) if isinstance(call, Call) else call


def _boundary(lease: Lease) -> _Boundary | None:
    with events.atomic():
        run = lease.locked_run()
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
            stop = steering_apply_pending(run)
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
            return _Boundary(agent_id=run.agent_id, step=step, ctx=ctx, pending=pending)
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
        return _Boundary(agent_id=run.agent_id, step=step, ctx=ctx, pending=None, view=view)


def _dispatch(lease: Lease, boundary: _Boundary, decision: Decision | None) -> Call | bool:
    """Act on the planner's decision (or the pending call) under the run lock. Returns the
    call to execute, True to go back to the boundary, or False to stop advancing."""
    with events.atomic():
        run = lease.locked_run()
        checkpoint = dict(run.checkpoint)
        if run.status != RunStatus.RUNNING or checkpoint.get("step", 0) != boundary.step:
            return False
        step, ctx = boundary.step, boundary.ctx
        agent = get_agent(run.agent_id)
        if decision is not None:
            if run.steering_pending:
                return True  # steering arrived while the planner thought: apply it first
            events.emit(
                run=run, type=events.PLANNER_DECISION, payload=PlannerDecision(Step=step, Decision=describe(decision))
            )
            if isinstance(decision, Finish):
                run_complete(run, decision.answer)
                return False
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
                return False
            pending: dict[str, Any] = {"tool": decision.tool, "args": decision.args, "step": step}
        else:
            assert boundary.pending is not None, "without a decision, a boundary carries its pending call"
            pending = boundary.pending
        tool = agent.tools.get(pending["tool"])
        if tool is None:
            run_fail(run, FailureCode.RUNTIME_ERROR, f"the planner called unknown tool {pending['tool']!r}")
            return False
        checkpoint["pending_call"] = pending
        run.checkpoint = checkpoint
        if tool.needs_approval(pending["args"]) and not pending.get("approved"):
            park_for_gate(run, ctx, tool, pending["args"])
            return False
        run.save(update_fields=["checkpoint", "updated_at"])
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
