"""Parking a run on a new pause: the pause and its token minted, the run paused, the events
written. The cause's registration (approvals.causes) says what it may park with."""

from datetime import timedelta

from django.utils import timezone

from approvals import causes
from approvals.models import Cause, Pause, PauseState
from notifications import Notice, NoticeKind, notify
from runs.domain import events
from runs.domain.event_types import CompanionPayload, NotificationPauseRequested, PauseRequested
from runs.domain.tokens import sign_in_seal, token_digest, token_mint, token_seal
from runs.domain.transitions import move
from runs.models import Run, RunStatus


def pause_park(
    *,
    run: Run,
    cause: str,
    reason: str,
    payload: dict,
    step: int,
    tool: str = "",
    tool_context: dict | None = None,
    handle_keys: dict | None = None,
    deadline: timedelta | None = None,
    companion: tuple[str, CompanionPayload] | None = None,
    summary: str = "",
    policy_version: int | None = None,
    policy_rule: dict | None = None,
    args_fingerprint: str = "",
) -> tuple[Pause, str]:
    """Park a running run on a new pause. Called by the runtime alone, holding the run lock.
    A cause nobody registered, or a reason or companion its registration does not name, is
    a programming error (UnknownCause, ValueError)."""
    spec = causes.get(cause)
    if reason not in spec.reasons:
        raise ValueError(f"a {cause} pause parks with {sorted(spec.reasons)}, not {reason!r}")
    if companion and companion[0] not in spec.companions:
        raise ValueError(f"a {cause} pause is accompanied by {sorted(spec.companions)}, not {companion[0]!r}")
    token = token_mint()
    now = timezone.now()
    pause = Pause(
        tenant_id=run.tenant_id,
        run=run,
        cause=cause,
        reason=reason,
        token_digest=token_digest(token),
        token_sealed=token_seal(token),
        identity_user=run.owner.username,
        identity_session=run.session,
        tool=tool,
        step=step,
        payload=sign_in_seal(payload),
        tool_context=tool_context or {},
        handle_keys=handle_keys or {},
        expires_at=now + deadline if deadline else None,
        policy_version=policy_version,
        policy_rule=policy_rule or {},
        args_fingerprint=args_fingerprint,
    )
    pause.save(force_insert=True)
    move(run, RunStatus.PAUSED, lease_owner="", lease_expires_at=None)
    expires = pause.expires_at.isoformat().replace("+00:00", "Z") if pause.expires_at else None
    events.emit(
        run=run,
        type=events.PAUSE_REQUESTED,
        pause=pause,
        payload=PauseRequested(Token=token, Reason=reason, Cause=cause, ExpiresAt=expires),
    )
    if companion:
        # Its PauseToken (a placeholder: the pause did not exist yet) is filled in from the pause.
        companion_type, companion_payload = companion
        events.emit(run=run, type=companion_type, pause=pause, payload=companion_payload)
    events.emit(
        run=run,
        type=events.NOTIFICATION_PAUSE_REQUESTED,
        pause=pause,
        payload=NotificationPauseRequested(
            Summary=summary or f"{cause} pause on {run.agent_id} run",
            Severity="action_required" if spec.is_gate else "info",
            Deeplink=f"/inbox/#pause-{pause.pk}",
            PauseToken=token,
        ),
    )
    notify(Notice.about(NoticeKind.PAUSE_REQUESTED, pause, summary or f"{cause} pause on {run.agent_id} run"))
    return pause, token


def parked_by_operator(run: Run) -> bool:
    """Whether the run's open pause is an operator's."""
    return run.pauses.filter(state=PauseState.PAUSED, cause=Cause.OPERATOR).exists()
