"""Approvals under a rule that needs several (approvals.policy): each one is recorded against
the fingerprint of the exact arguments it approved, and the gate clears only when enough
distinct people approved the same arguments. The caller holds the pause's lock."""

from typing import Any

from approvals.models import Approval, Pause, PauseState
from approvals.policy import ApprovalRule, arguments_fingerprint
from runs.identity.callers import Caller
from runs.kernel.errors import AlreadyResumed


def pause_rule(pause: Pause) -> ApprovalRule | None:
    """The rule that governed the gate when it parked; None: no policy did."""
    return ApprovalRule(**pause.policy_rule) if pause.policy_rule else None


def approval_count(pause: Pause, rule: ApprovalRule, *, caller: Caller, args: dict[str, Any], reason: str) -> bool:
    """Record `caller`'s approval of `args` and say whether the gate now has its quorum.
    Arguments other than the pause's current ones become its current ones (the requested
    ones stay in the payload as `ArgsRequested`), so approvals of the earlier ones stop
    counting."""
    fingerprint = arguments_fingerprint(args)
    if fingerprint != pause.args_fingerprint:
        payload = {**pause.payload, "Args": args}
        payload.setdefault("ArgsRequested", pause.payload.get("Args", {}))
        # The pause's one other sanctioned write while open, guarded like its settle.
        if (
            Pause.objects.filter(pk=pause.pk, state=PauseState.PAUSED).settle(
                payload=payload, args_fingerprint=fingerprint
            )
            != 1
        ):
            raise AlreadyResumed("the pause was decided concurrently")
        pause.payload, pause.args_fingerprint = payload, fingerprint
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
