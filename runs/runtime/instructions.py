"""The nine steering instructions of PROTOCOL §3, registered with what applies each: a
decision or a priority inside its request, the rest at the run's next step boundary (a
cancel or a pause at once where that is its whole effect)."""

from functools import partial
from typing import Any

from approvals.domain.services import parked_by_operator, pause_decide
from runs.domain import events
from runs.domain import instruction_payloads as payloads
from runs.domain.event_types import ContextInjected, MessageReceived, TaskPrioritised, TaskRedirected
from runs.domain.instructions import PRODUCT as PRODUCT_INSTRUCTIONS
from runs.domain.instructions import Applied, InstructionSpec, Registry, Submission, Timing
from runs.domain.transitions import save_run
from runs.identity.scopes import Scope
from runs.models import Instruction, Run, RunStatus

from .steering import lock_cascade, run_cancel_now
from .wake import wake_on_commit

# --- Applied inside the request -------------------------------------------------------------


def _decide(method: str, submission: Submission) -> Applied:
    run, payload = submission.run, submission.payload
    decided = pause_decide(
        caller=submission.caller,
        run=run,
        method=method,
        token=payload.get("token"),
        pause_id=submission.pause_id,
        reason=payload.get("reason", ""),
        args=payload.get("args"),
        input=payload.get("input"),
        target=submission.target,
    )
    if run.status == RunStatus.RUNNING:
        wake_on_commit()  # the decided run goes on: a worker takes its next step
    sealed = isinstance(decided.decision_input, dict) and "sealed" in decided.decision_input
    # A credential: its audit keeps it sealed too.
    return Applied(audited={**payload, "input": events.SEALED} if sealed else None)


def _prioritize(submission: Submission) -> Applied:
    run, priority = submission.run, submission.payload["priority"]
    prior = run.priority
    run.priority = priority
    save_run(run)
    events.emit(
        run=run,
        type=events.TASK_PRIORITISED,
        payload=TaskPrioritised(TaskID=run.pk, PriorPriority=prior, NewPriority=priority),
    )
    wake_on_commit()
    return Applied()


def _cancel_now(submission: Submission) -> Applied | None:
    """A run no worker holds (parked, queued) ends at once; a running one at its boundary,
    its step in flight interrupted now when the cancel is hard."""
    run, caller = submission.run, submission.caller
    if run.status != RunStatus.RUNNING:
        return Applied(then=partial(run_cancel_now, run, reason=f"cancelled by {caller.user.username}", cascaded=False))
    if submission.payload.get("hard"):
        Run.objects.filter(pk=run.pk).update(hard_cancel=True)
    return None


def _pause_now(submission: Submission) -> Applied | None:
    # An operator's pause holds the run already: applied as it stands.
    run = submission.run
    return Applied() if run.status == RunStatus.PAUSED and parked_by_operator(run) else None


# --- Applied at a step boundary (run lock held) ---------------------------------------------


def _stop(name: str, run: Run, payload: dict[str, Any]) -> str:
    return name  # the boundary ends or parks the run once every pending instruction is settled


def _redirect(run: Run, payload: dict[str, Any]) -> None:
    run.goal = payload["goal"]
    events.emit(run=run, type=events.TASK_REDIRECTED, payload=TaskRedirected(TaskID=run.pk, Goal=run.goal))


def _inject_context(run: Run, payload: dict[str, Any]) -> None:
    run.context = [*run.context, payload]
    events.emit(run=run, type=events.CONTEXT_INJECTED, payload=ContextInjected(TaskID=run.pk, Context=payload))


def _user_message(run: Run, payload: dict[str, Any]) -> None:
    run.messages = [*run.messages, payload["message"]]
    events.emit(
        run=run, type=events.MESSAGE_RECEIVED, payload=MessageReceived(TaskID=run.pk, Message=payload["message"])
    )


# --- The nine ---------------------------------------------------------------------------------

_DECISION_SUMMARIES = {
    Instruction.RESUME: "Resume a non-gate pause (owner_user)",
    Instruction.APPROVE: "Approve a HITL gate, synchronously (owner_user or delegated approver)",
    Instruction.REJECT: "Reject a HITL gate, synchronously; the run fails (owner_user or delegated approver)",
}
_DECISION_PAYLOADS: dict[str, type[payloads.InstructionPayload]] = {
    Instruction.RESUME: payloads.ResumePayload,
    Instruction.APPROVE: payloads.ApprovePayload,
    Instruction.REJECT: payloads.RejectPayload,
}


def instructions_nine() -> list[InstructionSpec]:
    at_boundary = partial(InstructionSpec, timing=Timing.AT_BOUNDARY)
    return [
        at_boundary(
            name=Instruction.CANCEL,
            payload=payloads.CancelPayload,
            scope=Scope.OWNER_USER,
            summary="Cancel a run (owner_user)",
            apply_now=_cancel_now,
            apply_at_boundary=partial(_stop, Instruction.CANCEL),
            lock_first=lock_cascade,  # its children, before the tenant's event cursor
        ),
        at_boundary(
            name=Instruction.PAUSE,
            payload=payloads.PausePayload,
            scope=Scope.OWNER_USER,
            summary="Park a run at its next step boundary (owner_user)",
            apply_now=_pause_now,
            apply_at_boundary=partial(_stop, Instruction.PAUSE),
        ),
        *(
            InstructionSpec(
                name=name,
                payload=_DECISION_PAYLOADS[name],
                scope=Scope.OWNER_USER,
                timing=Timing.AT_ONCE,
                summary=_DECISION_SUMMARIES[name],
                apply_now=partial(_decide, name),
                decides_pause=True,
            )
            for name in (Instruction.RESUME, Instruction.APPROVE, Instruction.REJECT)
        ),
        at_boundary(
            name=Instruction.REDIRECT,
            payload=payloads.RedirectPayload,
            scope=Scope.OWNER_USER,
            summary="Replace the run's goal (owner_user)",
            apply_at_boundary=_redirect,
        ),
        at_boundary(
            name=Instruction.INJECT_CONTEXT,
            payload=payloads.InjectContextPayload,
            scope=Scope.SESSION_USER,
            summary="Append planner context (session_user)",
            apply_at_boundary=_inject_context,
        ),
        at_boundary(
            name=Instruction.USER_MESSAGE,
            payload=payloads.UserMessagePayload,
            scope=Scope.SESSION_USER,
            summary="Deliver a user message (session_user)",
            apply_at_boundary=_user_message,
        ),
        InstructionSpec(
            name=Instruction.PRIORITIZE,
            payload=payloads.PrioritizePayload,
            scope=Scope.ADMIN,
            timing=Timing.AT_ONCE,
            summary="Change scheduling priority (admin)",
            apply_now=_prioritize,
        ),
    ]


def instructions_register(registry: Registry = PRODUCT_INSTRUCTIONS) -> None:
    """Register the nine (at app start, runs.apps)."""
    for spec in instructions_nine():
        registry.register(spec)
