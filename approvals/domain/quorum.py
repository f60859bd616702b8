"""Approvals under a rule that needs several (approvals.policy): each one is recorded against
the fingerprint of the exact arguments it approved, and the gate clears only when enough
distinct people approved the same arguments. The caller holds the pause's lock."""

from dataclasses import asdict
from typing import Any

from approvals.models import Approval, Pause, PauseState
from approvals.policy import ApprovalGate, ApprovalRule, approval_rule_for, arguments_fingerprint
from approvals.policy.rules import strictest
from runs.identity.callers import Caller
from runs.kernel.errors import AlreadyResumed


def pause_rule(pause: Pause) -> ApprovalRule | None:
    """The rule that governed the gate when it parked; None: no policy did."""
    return ApprovalRule(**pause.policy_rule) if pause.policy_rule else None


def rule_for_arguments(pause: Pause, rule: ApprovalRule | None, args: dict[str, Any]) -> ApprovalGate | None:
    """The rule for approving `args` other than the gate's current ones: the stricter of the
    gate's rule and the one the policy in force gives the edited call, so an edit never
    moves a call out from under a rule (a staging deploy edited into production needs what
    production needs). None: the arguments are the current ones, or no rule covers them."""
    if arguments_fingerprint(args) == pause.args_fingerprint:
        return None
    outcome = approval_rule_for(
        tenant=pause.tenant, tool=pause.tool, arguments=args, requester=pause.identity_user, agent=pause.run.agent_id
    )
    if not isinstance(outcome, ApprovalGate):
        return None
    chosen = outcome.rule if rule is None else strictest([rule, outcome.rule])
    return ApprovalGate(rule=chosen, version=outcome.version if chosen != rule else pause.policy_version or 0)


def approval_count(
    pause: Pause,
    rule: ApprovalRule,
    *,
    caller: Caller,
    args: dict[str, Any],
    reason: str,
    version: int | None = None,
) -> bool:
    """Record `caller`'s approval of `args` and say whether the gate now has its quorum.
    Arguments other than the pause's current ones become its current ones (the requested
    ones stay in the payload as `ArgsRequested`), so approvals of the earlier ones stop
    counting."""
    fingerprint = arguments_fingerprint(args)
    if fingerprint != pause.args_fingerprint:
        payload = {**pause.payload, "Args": args}
        payload.setdefault("ArgsRequested", pause.payload.get("Args", {}))
        fields: dict[str, Any] = {"payload": payload, "args_fingerprint": fingerprint}
        if version is not None and asdict(rule) != pause.policy_rule:  # the edit brought a stricter rule
            fields.update(policy_rule=asdict(rule), policy_version=version)
        # The pause's one other sanctioned write while open, guarded like its settle.
        if Pause.objects.filter(pk=pause.pk, state=PauseState.PAUSED).settle(**fields) != 1:
            raise AlreadyResumed("the pause was decided concurrently")
        for name, value in fields.items():
            setattr(pause, name, value)
    approvals = Approval.objects.filter(pause=pause, fingerprint=fingerprint)
    if approvals.filter(actor=caller.user).exists():
        raise AlreadyResumed("you have already approved these arguments")
    Approval.objects.create(
        pause=pause,
        actor=caller.user,
        actor_session=caller.session,
        fingerprint=fingerprint,
        arguments=args,
        reason=reason,
    )
    return approvals.values("actor").distinct().count() >= rule.quorum
