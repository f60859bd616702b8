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
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from runs.domain import events
from runs.domain.errors import ErrToolContextLost, ErrUnserializable
from runs.domain.event_types import (
    PlannerDecision,
    TaskStarted,
    ToolCompleted,
    ToolFailed,
    ToolInvoked,
    tool_pause_companion,
)
from runs.domain.transitions import move, run_complete, run_fail
from runs.models import FailureCode, Run, RunStatus, ToolCall, ToolCallOutcome

from .lease import Lease, LeaseLost, lease_length
from .ledger import open_attempt, settle_attempt
from .parking import park, park_for_gate, park_for_operator
from .planner import Decision, Finish, PlannerView, RequestPause, describe
from .registry import get_agent
from .steering import steering_apply_pending
from .tools import Interrupted, Tool, ToolContext, ToolPause

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
class _Call:
    """A tool call about to run (or running): what the record phase re-checks."""

    tool: Tool
    args: dict
    step: int
    ctx: ToolContext
    attempt: ToolCall


@dataclass
class _Boundary:
    agent_id: str
    step: int
    ctx: ToolContext
    pending: dict[str, Any] | None
    view: PlannerView | None = None


def _locked(lease: Lease) -> Run:
    """The run under its row lock, if this worker still holds an unexpired lease on it (the
    fence), which is renewed while the lock is held. `no_key`: the run's key never changes,
    so rows pointing at it (events, pauses) may still be inserted meanwhile."""
    run = Run.objects.select_for_update(no_key=True, of=("self",)).select_related("owner").get(pk=lease.run_id)
    if run.is_terminal:
        return run  # ended meanwhile (a cancel, a rejection): the caller stops here
    now = timezone.now()
    if run.lease_owner != lease.worker or run.lease_expires_at is None or run.lease_expires_at < now:
        lease.lost.set()
        raise LeaseLost(lease.run_id)
    run.lease_expires_at = now + lease_length()
    Run.objects.filter(pk=run.pk).update(lease_expires_at=run.lease_expires_at)
    return run


def _end(lease: Lease, finish: Callable[[Run], object]) -> None:
    with events.atomic():
        try:
            run = _locked(lease)
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
    return _execute(lease, call) if isinstance(call, _Call) else call


def _boundary(lease: Lease) -> _Boundary | None:
    with events.atomic():
        run = _locked(lease)
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


def _dispatch(lease: Lease, boundary: _Boundary, decision: Decision | None) -> _Call | bool:
    """Act on the planner's decision (or the pending call) under the run lock. Returns the
    call to execute, True to go back to the boundary, or False to stop advancing."""
    with events.atomic():
        run = _locked(lease)
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
        events.emit(
            run=run,
            type=events.TOOL_INVOKED,
            payload=ToolInvoked(Tool=tool.name, Step=step, Args=pending["args"], Attempt=attempt.attempt),
        )
        return _Call(tool=tool, args=pending["args"], step=step, ctx=ctx, attempt=attempt)


def _execute(lease: Lease, call: _Call) -> bool:
    """Run the tool body outside any transaction, then record what happened."""
    ctx, attempt = call.ctx, call.attempt
    ctx.idempotency_key = attempt.idempotency_key
    ctx.fence = lease.fence
    ctx.interrupted = _interrupt_probe(lease)
    try:
        with lease.heartbeat():
            result = call.tool.run(call.args, ctx)
    except ToolPause as signal:
        pause = signal

        def park_signalled(run: Run) -> bool:
            return park(
                run,
                ctx,
                cause=pause.cause,
                reason=pause.reason,
                payload=pause.payload,
                summary=pause.summary,
                deadline=pause.deadline,
                tool=call.tool.name,
                companion=(pause.companion, tool_pause_companion(pause.payload, events.SEALED)),
                on_park=pause.on_park,
            )

        return _record(lease, call, ToolCallOutcome.PAUSED, park_signalled)
    except LeaseLost:
        settle_attempt(attempt, ToolCallOutcome.FENCED, "the worker lost its lease")
        raise
    except Interrupted:
        settle_attempt(attempt, ToolCallOutcome.INTERRUPTED)
        return True  # the next boundary applies the hard cancel; the step is not recorded
    except ErrToolContextLost as lost:
        message = lost.message
        return _record(
            lease,
            call,
            ToolCallOutcome.FAILED,
            lambda run: run_fail(run, FailureCode.TOOL_CONTEXT_LOST, message),
            message,
        )
    except Exception as error:
        message = f"{call.tool.name}: {type(error).__name__}: {error}"

        def failed(run: Run) -> None:
            events.emit(
                run=run, type=events.TOOL_FAILED, payload=ToolFailed(Tool=call.tool.name, Step=call.step, Error=message)
            )
            run_fail(run, FailureCode.RUNTIME_ERROR, message)

        return _record(lease, call, ToolCallOutcome.FAILED, failed, message)
    return _record(lease, call, ToolCallOutcome.COMPLETED, lambda run: _checkpoint(run, call, result))


def _record(lease: Lease, call: _Call, outcome: str, apply: Callable[[Run], object], error: str = "") -> bool:
    """Record an attempt's outcome under the run lock, only if this worker still holds the
    run and the attempt is still the step's live one (the fence)."""
    with events.atomic():
        try:
            run = _locked(lease)
        except LeaseLost:
            settle_attempt(call.attempt, ToolCallOutcome.FENCED, "the worker lost its lease")
            raise
        current = ToolCall.objects.filter(pk=call.attempt.pk, outcome=ToolCallOutcome.RUNNING).exists()
        if run.status != RunStatus.RUNNING or run.checkpoint.get("step", 0) != call.step or not current:
            settle_attempt(call.attempt, ToolCallOutcome.FENCED, f"the run moved on (it is {run.status})")
            return False
        settle_attempt(call.attempt, outcome, error)
        return bool(apply(run))


def _checkpoint(run: Run, call: _Call, result: object) -> bool:
    try:
        saved_context = call.ctx.serialized()
    except ErrUnserializable as error:
        run_fail(run, FailureCode.RUNTIME_ERROR, error.message)
        return False
    checkpoint = dict(run.checkpoint)
    checkpoint["history"] = [
        *checkpoint.get("history", []),
        {"tool": call.tool.name, "args": call.args, "result": result},
    ]
    checkpoint["step"] = call.step + 1
    checkpoint["tool_context"] = saved_context
    checkpoint.pop("pending_call", None)
    checkpoint.pop("resolution", None)
    run.checkpoint = checkpoint
    run.save(update_fields=["checkpoint", "updated_at"])
    events.emit(
        run=run,
        type=events.TOOL_COMPLETED,
        payload=ToolCompleted(Tool=call.tool.name, Step=call.step, Result=result, Attempt=call.attempt.attempt),
    )
    return True


def _interrupt_probe(lease: Lease) -> Callable[[], bool]:
    """A cheap, throttled check for a hard cancel of the step in flight, or a lost lease."""
    checked_at, cancelled = 0.0, False

    def interrupted() -> bool:
        nonlocal checked_at, cancelled
        if lease.lost.is_set():
            raise LeaseLost(lease.run_id)
        now = time.monotonic()
        if now - checked_at >= 0.1:
            checked_at = now
            cancelled = Run.objects.filter(pk=lease.run_id, hard_cancel=True).exists()
        return cancelled

    return interrupted
