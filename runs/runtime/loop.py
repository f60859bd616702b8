"""The run loop: advance one claimed run a step at a time.

Each step boundary, inside one transaction holding the run's row lock: check the lease,
apply pending steering, then ask the planner. Tools run outside any transaction; their
result is checkpointed (with the lease re-checked) before the next boundary, so a step
that completed never runs again after a resume, a crash or a duplicate delivery."""

import logging
import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.models import Cause, Decision, Reason
from approvals.services import pause_park
from runs import events
from runs.errors import ErrToolContextLost, ErrUnserializable
from runs.models import FailureCode, Run, RunStatus
from runs.transitions import move, run_complete, run_fail

from . import handles
from .planner import CallTool, Finish, PlannerView, RequestPause, describe
from .registry import get_agent
from .tools import Interrupted, ToolContext, ToolPause

log = logging.getLogger("harbor.runtime")

READY = (RunStatus.PENDING, RunStatus.RUNNING)


def new_worker_id() -> str:
    return uuid.uuid4().hex


def claim(run_id: str, worker: str) -> bool:
    """Take the run's lease if it is free or expired (its holder died). The row count of
    this conditional UPDATE decides between competing workers."""
    now = timezone.now()
    return (
        Run.objects.filter(pk=run_id, status__in=READY)
        .filter(Q(lease_owner="") | Q(lease_expires_at__lt=now))
        .update(lease_owner=worker, lease_expires_at=now + _lease())
        == 1
    )


def claimable():
    return Run.objects.filter(status__in=READY).filter(Q(lease_owner="") | Q(lease_expires_at__lt=timezone.now()))


def advance(run_id: str, worker: str | None = None) -> bool:
    """Claim and advance a run until it parks, ends or loses its lease."""
    worker = worker or new_worker_id()
    if not claim(run_id, worker):
        return False
    advance_claimed(run_id, worker)
    return True


def advance_claimed(run_id: str, worker: str) -> None:
    try:
        while _step(run_id, worker):
            pass
    except Exception as error:  # a bug in a planner or the runtime fails the run loudly
        log.exception("run %s crashed", run_id)
        _end(run_id, worker, lambda run: run_fail(run, FailureCode.RUNTIME_ERROR, f"{type(error).__name__}: {error}"))
    finally:
        Run.objects.filter(pk=run_id, lease_owner=worker).update(lease_owner="", lease_expires_at=None)


def _lease() -> timedelta:
    return timedelta(seconds=settings.HARBOR_LEASE_SECONDS)


def _locked(run_id: str, worker: str) -> Run | None:
    run = Run.objects.select_for_update(of=("self",)).select_related("owner").get(pk=run_id)
    return run if run.lease_owner == worker else None


def _end(run_id: str, worker: str, finish) -> None:
    with transaction.atomic():
        run = _locked(run_id, worker)
        if run is not None and not run.is_terminal:
            finish(run)
    if Run.objects.filter(pk=run_id, status__in=[RunStatus.COMPLETE, RunStatus.FAILED, RunStatus.CANCELLED]).exists():
        handles.release_run(run_id)


def _step(run_id: str, worker: str) -> bool:
    """One step. Returns True to go on with the next step."""
    with transaction.atomic():
        run = _locked(run_id, worker)
        if run is None:
            return False  # the lease was lost: someone else owns the run now
        if run.status == RunStatus.PENDING:
            move(run, RunStatus.RUNNING)
            events.emit(
                run=run,
                type=events.TASK_STARTED,
                payload={"TaskID": run.pk, "Priority": run.priority, "ParentTaskID": run.parent_id},
            )
        if run.status != RunStatus.RUNNING:
            return False
        if run.steering_pending:
            from runs.services import steering_apply_pending

            stop = steering_apply_pending(run)
            if stop == "cancel":
                handles.release_run(run_id)
                return False
            if stop == "pause":
                return _park_for_operator(run)
        Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() + _lease())
        try:
            ctx = ToolContext.restore(run.pk, run.checkpoint.get("tool_context"))
        except ErrToolContextLost as lost:
            run_fail(run, FailureCode.TOOL_CONTEXT_LOST, lost.message)
            return False
        checkpoint = run.checkpoint
        resolution = checkpoint.get("resolution")
        pending = checkpoint.get("pending_call")
        agent = get_agent(run.agent_id)
        step = checkpoint.get("step", 0)
        if pending:
            decision = CallTool(pending["tool"], (resolution or {}).get("args") or pending["args"])
            ctx.resumed = resolution
        else:
            decision = agent.planner().decide(
                PlannerView(
                    run_id=run.pk, goal=run.goal, query=checkpoint.get("query", run.goal), step=step,
                    history=list(checkpoint.get("history", [])), context=list(run.context),
                    messages=list(run.messages), resumed=resolution,
                )
            )
            events.emit(run=run, type=events.PLANNER_DECISION, payload={"Step": step, "Decision": describe(decision)})

        if isinstance(decision, Finish):
            run_complete(run, decision.answer)
            handles.release_run(run_id)
            return False
        if isinstance(decision, RequestPause):
            return _park(run, ctx, cause=decision.cause, reason=decision.reason, payload=decision.payload,
                         summary=decision.summary, history_entry={"pause": decision.cause})
        tool = agent.tools.get(decision.tool)
        if tool is None:
            run_fail(run, FailureCode.RUNTIME_ERROR, f"the planner called unknown tool {decision.tool!r}")
            return False
        approved = bool(pending) and (resolution or {}).get("decision") == Decision.APPROVE
        if tool.needs_approval(decision.args) and not approved:
            return _park_for_gate(run, ctx, tool, decision.args, step)
        events.emit(run=run, type=events.TOOL_INVOKED, payload={"Tool": tool.name, "Step": step, "Args": decision.args})

    ctx.interrupted = _interrupt_probe(run_id)
    try:
        result = tool.run(decision.args, ctx)
    except ToolPause as signal:
        with transaction.atomic():
            run = _locked(run_id, worker)
            if run is None or run.status != RunStatus.RUNNING:
                return False
            return _park(run, ctx, cause=signal.cause, reason=signal.reason, payload=signal.payload,
                         summary=signal.summary, deadline=signal.deadline, tool=tool.name,
                         companion=(signal.companion, signal.payload),
                         pending_call={"tool": tool.name, "args": decision.args})
    except Interrupted:
        return True  # the next boundary applies the hard cancel; the step is not recorded
    except ErrToolContextLost as lost:
        _end(run_id, worker, lambda r: run_fail(r, FailureCode.TOOL_CONTEXT_LOST, lost.message))
        return False
    except Exception as error:
        message = f"{tool.name}: {type(error).__name__}: {error}"

        def failed(r: Run) -> None:
            events.emit(run=r, type=events.TOOL_FAILED, payload={"Tool": tool.name, "Step": step, "Error": message})
            run_fail(r, FailureCode.RUNTIME_ERROR, message)

        _end(run_id, worker, failed)
        return False

    with transaction.atomic():
        run = _locked(run_id, worker)
        if run is None or run.status != RunStatus.RUNNING:
            return False  # lost the lease or ended meanwhile: the result is not recorded
        try:
            saved_context = ctx.serialized()
        except ErrUnserializable as error:
            run_fail(run, FailureCode.RUNTIME_ERROR, error.message)
            return False
        checkpoint = dict(run.checkpoint)
        checkpoint["history"] = [*checkpoint.get("history", []), {"tool": tool.name, "args": decision.args, "result": result}]
        checkpoint["step"] = step + 1
        checkpoint["tool_context"] = saved_context
        checkpoint.pop("pending_call", None)
        checkpoint.pop("resolution", None)
        run.checkpoint = checkpoint
        run.save(update_fields=["checkpoint", "updated_at"])
        events.emit(run=run, type=events.TOOL_COMPLETED, payload={"Tool": tool.name, "Step": step, "Result": result})
    return True


def _park(run: Run, ctx: ToolContext, *, cause: str, reason: str, payload: dict, summary: str = "",
          deadline=None, tool: str = "", companion=None, pending_call=None, history_entry=None) -> bool:
    """Mint a pause (run lock held). A context that cannot be checkpointed fails the pause
    and the run, naming the field."""
    try:
        saved_context = ctx.serialized()
    except ErrUnserializable as error:
        run_fail(run, FailureCode.RUNTIME_ERROR, error.message)
        return False
    checkpoint = dict(run.checkpoint)
    step = checkpoint.get("step", 0)
    checkpoint["tool_context"] = saved_context
    checkpoint.pop("resolution", None)
    if pending_call:
        checkpoint["pending_call"] = {**pending_call, "step": step}
    if history_entry:
        checkpoint["history"] = [*checkpoint.get("history", []), history_entry]
        checkpoint["step"] = step + 1
    run.checkpoint = checkpoint
    pause_park(
        run=run, cause=cause, reason=reason, payload=payload, step=step, tool=tool,
        tool_context=saved_context["state"], handle_keys=saved_context["handles"], deadline=deadline,
        companion=companion, summary=summary,
    )
    return False


def _park_for_gate(run: Run, ctx: ToolContext, tool, args: dict, step: int) -> bool:
    reason = tool.gate_reason or f"{tool.name} is gated behind human approval"
    summary = ", ".join(f"{k}={v}" for k, v in args.items())
    return _park(
        run, ctx, cause=Cause.HITL_APPROVAL, reason=Reason.APPROVAL_REQUIRED, tool=tool.name,
        payload={"Tool": tool.name, "Args": args, "GateReason": reason, "Editable": tool.editable_args},
        deadline=tool.deadline, summary=f"Approve {tool.name}({summary})",
        companion=(events.TOOL_APPROVAL_REQUESTED,
                   {"Tool": tool.name, "Reason": reason, "ArgsSummary": summary, "Editable": tool.editable_args}),
        pending_call={"tool": tool.name, "args": args},
    )


def _park_for_operator(run: Run) -> bool:
    try:
        ctx = ToolContext.restore(run.pk, run.checkpoint.get("tool_context"))
    except ErrToolContextLost as lost:
        run_fail(run, FailureCode.TOOL_CONTEXT_LOST, lost.message)
        return False
    return _park(run, ctx, cause=Cause.OPERATOR, reason=Reason.AWAIT_INPUT,
                 payload={"Summary": "paused by an operator"}, summary=f"{run.agent_id} run paused by an operator")


def _interrupt_probe(run_id: str):
    """A cheap, throttled check for a hard cancel of the step in flight."""
    last = {"at": 0.0, "value": False}

    def interrupted() -> bool:
        now = time.monotonic()
        if now - last["at"] >= 0.1:
            last["at"] = now
            last["value"] = Run.objects.filter(pk=run_id, hard_cancel=True).exists()
        return last["value"]

    return interrupted
