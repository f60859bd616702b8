"""Parking a run on a pause (run lock held): the tool context is checkpointed, a pending
call (and an approval it already holds) stays in the checkpoint, and the pause is minted by
approvals.domain.services.pause_park."""

from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta

from approvals.domain.services import pause_park
from approvals.models import Cause, Pause, Reason
from approvals.policy import ApprovalGate, ApprovalWaived, PolicyOutcome, approval_rule_for, arguments_fingerprint
from runs.domain import events
from runs.domain.event_types import CompanionPayload, ToolApprovalRequested
from runs.domain.transitions import run_fail
from runs.kernel.errors import ErrToolContextLost, ErrUnserializable
from runs.models import FailureCode, Run

from .tools import Tool, ToolContext


def park(
    run: Run,
    ctx: ToolContext,
    *,
    cause: str,
    reason: str,
    payload: dict,
    summary: str = "",
    deadline: timedelta | None = None,
    tool: str = "",
    companion: tuple[str, CompanionPayload] | None = None,
    history_entry: dict | None = None,
    on_park: Callable[[Pause], object] | None = None,
    policy: dict | None = None,
) -> bool:
    """Mint a pause (run lock held). A context that cannot be checkpointed fails the pause
    and the run, naming the field. A pending call (and an approval it already holds) is
    kept in the checkpoint, so the same call goes on after the pause."""
    try:
        saved_context = ctx.serialized()
    except ErrUnserializable as error:
        run_fail(run, FailureCode.RUNTIME_ERROR, error.message)
        return False
    checkpoint = dict(run.checkpoint)
    step = checkpoint.get("step", 0)
    checkpoint["tool_context"] = saved_context
    checkpoint.pop("resolution", None)
    if history_entry:
        checkpoint["history"] = [*checkpoint.get("history", []), history_entry]
        checkpoint["step"] = step + 1
    run.checkpoint = checkpoint
    pause, _ = pause_park(
        run=run,
        cause=cause,
        reason=reason,
        payload=payload,
        step=step,
        tool=tool,
        tool_context=saved_context["state"],
        handle_keys=saved_context["handles"],
        deadline=deadline,
        companion=companion,
        summary=summary,
        **(policy or {}),
    )
    if on_park is not None:
        on_park(pause)  # in this transaction: what the tool binds to the pause exists with it
    return False


def gate_policy(run: Run, tool: Tool, args: dict) -> PolicyOutcome:
    """What the tenant's approval policy says of this call, the run's owner asking."""
    return approval_rule_for(
        tenant=run.tenant, tool=tool.name, arguments=args, requester=run.owner.username, agent=run.agent_id
    )


def gate_needed(outcome: PolicyOutcome, tool: Tool, args: dict) -> bool:
    """A rule gates the call, a forbid waives its gate; otherwise the tool's own setting."""
    if isinstance(outcome, ApprovalGate):
        return True
    if isinstance(outcome, ApprovalWaived):
        return False
    return tool.needs_approval(args)


def park_for_gate(run: Run, ctx: ToolContext, tool: Tool, args: dict, outcome: PolicyOutcome | None = None) -> bool:
    """Park the call at its gate; under a rule (`outcome` an ApprovalGate), the pause keeps
    the rule, and the rule's deadline replaces the tool's."""
    gate = outcome if isinstance(outcome, ApprovalGate) else None
    reason = tool.gate_reason or f"{tool.name} is gated behind human approval"
    summary = ", ".join(f"{k}={v}" for k, v in args.items())
    deadline = tool.deadline
    policy: dict = {"args_fingerprint": arguments_fingerprint(args)}
    if gate is not None:
        policy.update(policy_version=gate.version, policy_rule=asdict(gate.rule))
        if gate.rule.deadline_minutes:
            deadline = timedelta(minutes=gate.rule.deadline_minutes)
    return park(
        run,
        ctx,
        cause=Cause.HITL_APPROVAL,
        reason=Reason.APPROVAL_REQUIRED,
        tool=tool.name,
        payload={
            "Tool": tool.name,
            "Args": args,
            "GateReason": reason,
            "Editable": tool.editable_args,
            "ArgsSchema": tool.arguments,
        },
        deadline=deadline,
        summary=f"Approve {tool.name}({summary})",
        policy=policy,
        companion=(
            events.TOOL_APPROVAL_REQUESTED,
            ToolApprovalRequested(
                Tool=tool.name,
                PauseToken=events.SEALED,  # the pause is minted next; its token fills this in
                Reason=reason,
                ArgsSummary=summary,
                Editable=tool.editable_args,
            ),
        ),
    )


def park_for_operator(run: Run) -> bool:
    try:
        ctx = ToolContext.restore(run.pk, run.checkpoint.get("tool_context"))
    except ErrToolContextLost as lost:
        run_fail(run, FailureCode.TOOL_CONTEXT_LOST, lost.message)
        return False
    return park(
        run,
        ctx,
        cause=Cause.OPERATOR,
        reason=Reason.AWAIT_INPUT,
        payload={"Summary": "paused by an operator"},
        summary=f"{run.agent_id} run paused by an operator",
    )
