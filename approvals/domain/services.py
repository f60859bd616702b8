"""Every pause transition: park (mint a pause and its token), decide, expire.

Lock order is always run, then pause. Callers that decide hold the run's row lock."""

import logging
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from approvals.a2a.answers import a2a_input
from approvals.a2a.cancel import cancel_remote_on_commit
from approvals.domain import refusals
from approvals.models import Cause, Decision, Pause, PauseState
from notifications import Notice, NoticeKind, notify
from runs.domain import events
from runs.domain.event_types import (
    CompanionPayload,
    NotificationPauseRequested,
    PauseRequested,
    PauseResumed,
    ToolDecided,
)
from runs.domain.tokens import SIGN_IN_SEALED, sign_in_seal, token_digest, token_mint, token_seal
from runs.domain.transitions import move, run_cancelled, run_reject
from runs.identity.callers import Caller
from runs.identity.visibility import may_decide_pause, may_view_pause
from runs.kernel.errors import AlreadyResumed, InvalidRequest, NotFound, PayloadInvalid, ScopeMismatch
from runs.models import Run, RunStatus

log = logging.getLogger("harbor.approvals")

DECISION_FOR_METHOD = {"approve": Decision.APPROVE, "reject": Decision.REJECT, "resume": Decision.RESUME}
GATE_DECISIONS = frozenset({Decision.APPROVE, Decision.REJECT})
NO_OPEN_PAUSE = "no open pause matches for this caller"


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
) -> tuple[Pause, str]:
    """Park a running run on a new pause. Called by the runtime alone, holding the run lock."""
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
            Severity="action_required" if cause == Cause.HITL_APPROVAL else "info",
            Deeplink=f"/inbox/#pause-{pause.pk}",
            PauseToken=token,
        ),
    )
    notify(Notice.about(NoticeKind.PAUSE_REQUESTED, pause, summary or f"{cause} pause on {run.agent_id} run"))
    return pause, token


def pause_decide(
    *,
    caller: Caller,
    run: Run,
    method: str,
    token: str | None = None,
    pause_id: str | None = None,
    reason: str = "",
    args: object = None,
    input: object = None,
    target: Pause | None = None,
) -> Pause:
    """Decide a pause synchronously (approve, reject or resume). The caller holds `run`'s
    row lock; the pause is locked here and its state re-checked, and its settle is guarded by
    that state, so of any number of concurrent decisions exactly one lands. The pause is named
    by its resume token (a program), by its id (the pages, which never hold a token), or is
    the run's open one; `target`: the one `pause_targeted` already locked. A run that goes on
    is the caller's to wake."""
    decision = DECISION_FOR_METHOD[method]
    pause = target or _target_pause(caller=caller, run=run, method=method, token=token, pause_id=pause_id)

    if not may_decide_pause(caller, pause):
        _refuse(caller, method, pause, "scope_mismatch")
        if may_view_pause(caller, pause):
            raise ScopeMismatch("the caller may see this pause but not decide it")
        raise NotFound(NO_OPEN_PAUSE)
    if not pause.is_open:
        raise AlreadyResumed(f"the pause is already {pause.state} (decision: {pause.decision})")
    if (decision in GATE_DECISIONS) != (pause.cause == Cause.HITL_APPROVAL):
        # No open pause of the kind the method decides (PROTOCOL §3: approve and reject clear
        # a gate, resume the run's non-gate pause).
        raise NotFound(
            "approve and reject decide approval gates; resume releases the other pauses"
            f" (this pause's cause is {pause.cause})"
        )
    if reason is not None and not isinstance(reason, str):
        raise PayloadInvalid("reason must be a string")
    final_args = _approved_args(pause, args) if decision == Decision.APPROVE else None
    if decision != Decision.APPROVE and args is not None:
        raise PayloadInvalid("args may only accompany approve")

    if pause.cause == Cause.A2A:
        # The answer the remote agent gets: bounded, never empty (or the OAuth leg's sign-in).
        input = a2a_input(pause.reason, input, signs_in=SIGN_IN_SEALED in (pause.payload or {}))
    _settle(pause, decision, actor=caller, reason=reason or "", decision_input=input)
    events.emit(
        run=run,
        type=events.PAUSE_RESUMED,
        pause=pause,
        payload=PauseResumed(Token=events.SEALED, Reason=pause.reason, Cause=pause.cause, Decision=decision),
    )
    if decision in GATE_DECISIONS:
        events.emit(
            run=run,
            type=events.TOOL_APPROVED if decision == Decision.APPROVE else events.TOOL_REJECTED,
            pause=pause,
            payload=ToolDecided(
                Tool=pause.tool,
                PauseToken=events.SEALED,
                ApproverReason=reason or "",
                Actor=caller.user.username,
            ),
        )
    if decision == Decision.REJECT:
        # Terminal: the gated call never runs and no reconsideration exists.
        run_reject(
            run, f"approval of {pause.tool} rejected by {caller.user.username}" + (f": {reason}" if reason else "")
        )
        return pause

    checkpoint = dict(run.checkpoint)
    if decision == Decision.APPROVE and checkpoint.get("pending_call"):
        # The approval travels with the call it approves, so an operator pause (or any
        # other park) before the call runs cannot drop it: the gate opens once.
        checkpoint["pending_call"] = {**checkpoint["pending_call"], "args": final_args, "approved": pause.pk}
    checkpoint["resolution"] = {
        "pause": pause.pk,
        "decision": decision,
        "args": final_args,
        "input": input,
        "reason": reason or "",
    }
    move(run, RunStatus.RUNNING, checkpoint=checkpoint, queued_at=timezone.now())
    return pause


def pause_close(*, run: Run, pause: Pause, decision: str, reason: str = "") -> None:
    """Resolve an open pause without a human decision (timeout, cancel). Run lock held."""
    _settle(pause, decision, actor=None, reason=reason, decision_input=None)
    if pause.cause == Cause.A2A:
        cancel_remote_on_commit(pause.tenant_id, pause.tool_context)  # the remote task ends with ours
    events.emit(
        run=run,
        type=events.PAUSE_RESUMED,
        pause=pause,
        payload=PauseResumed(Token=events.SEALED, Reason=pause.reason, Cause=pause.cause, Decision=decision),
    )


def pause_sweep_overdue(*, now: datetime | None = None) -> int:
    """Resolve every overdue open pause with `timeout`: terminal, like a rejection."""
    now = now or timezone.now()
    overdue = Pause.objects.filter(state=PauseState.PAUSED, expires_at__lte=now).values_list("pk", "run_id")
    resolved = 0
    for pause_id, run_id in list(overdue):
        with events.atomic():
            run = Run.objects.locked().get(pk=run_id)
            pause = Pause.objects.select_for_update(no_key=True).get(pk=pause_id)
            if not pause.is_open:  # decided while we were looking
                continue
            pause_close(run=run, pause=pause, decision=Decision.TIMEOUT, reason="deadline passed")
            run_reject(run, f"{pause.cause} pause expired at {pause.expires_at.isoformat()}")
            resolved += 1
    return resolved


def pause_cancel_open(*, run: Run, reason: str, cascaded: bool) -> None:
    """Cancel a parked run: its open pause resolves `cancel` and the run ends. Run lock held."""
    pause = run.pauses.select_for_update(no_key=True).filter(state=PauseState.PAUSED).first()
    if pause is not None:
        pause_close(run=run, pause=pause, decision=Decision.CANCEL, reason=reason)
    run_cancelled(run, reason, cascaded)


def pause_targeted(*, run: Run, token: object, pause_id: str | None) -> Pause | None:
    """The pause a decision on `run` names, under its lock (the caller holds the run's): the
    named one, the token's, else the run's newest. None: no such pause (`pause_decide` then
    refuses, and audits, as it finds)."""
    pauses = Pause.objects.select_for_update(no_key=True).filter(run=run)
    if pause_id is not None:
        pause = pauses.filter(pk=pause_id).first()
    elif token is not None:
        pause = pauses.filter(token_digest=token_digest(token)).first() if isinstance(token, str) and token else None
    else:
        pause = pauses.order_by("-created_at").first()
    if pause is not None:
        pause.run = run  # as the related manager would: the run is already at hand
    return pause


def _target_pause(*, caller: Caller, run: Run, method: str, token: str | None, pause_id: str | None) -> Pause:
    pauses = Pause.objects.select_for_update(no_key=True).filter(run=run)
    if pause_id is not None:
        pause = pauses.filter(pk=pause_id).first()
        if pause is None:
            raise NotFound(NO_OPEN_PAUSE)
        pause.run = run  # as the related manager would: the run is already at hand
        return pause
    if token is not None:
        if not isinstance(token, str) or not token:
            raise InvalidRequest("token must be a non-empty string")
        # Only this run's pauses are locked (its run lock held): locking another run's pause
        # here would break the lock order (run, then pause).
        digest = token_digest(token)
        pause = pauses.filter(token_digest=digest).first()
        if pause is not None:
            pause.run = run
            return pause
        # Wrong, foreign and unknown tokens are refused alike, and audited.
        found = Pause.objects.filter(token_digest=digest, tenant=caller.tenant).first()
        _refuse(caller, method, found, "not_found")
        raise NotFound(NO_OPEN_PAUSE)
    # The run's newest pause: a run parks only while running, so an open pause is its newest.
    # By the run alone, so the plan is the run's few pauses whatever the statistics say (a
    # state filter could walk every pause ever opened, dead index entries included).
    pause = pauses.order_by("-created_at").first()
    if pause is None:
        raise NotFound("the run has no pause")
    pause.run = run  # as the related manager would: the run is already at hand
    return pause


def _approved_args(pause: Pause, args: object) -> dict[str, Any]:
    original = pause.payload.get("Args", {})
    if args is None:
        return original
    if not pause.payload.get("Editable"):
        raise PayloadInvalid(f"the gate on {pause.tool} does not allow edited arguments")
    if not isinstance(args, dict):
        raise PayloadInvalid("args must be an object")
    unknown = sorted(set(args) - set(original))
    if unknown:
        raise PayloadInvalid(f"{pause.tool} takes no argument(s) {', '.join(unknown)}")
    retyped = sorted(
        name
        for name, value in args.items()
        if original[name] is not None and _json_kind(value) != _json_kind(original[name])
    )
    if retyped:
        raise PayloadInvalid(f"an edited argument keeps its type: {', '.join(retyped)}")
    return {**original, **args}


def _json_kind(value: object) -> str:
    """A JSON value's type, numbers as one (an edited 2 may become 2.5)."""
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, int | float) else type(value).__name__


def _settle(pause: Pause, decision: str, *, actor: Caller | None, reason: str, decision_input: object) -> None:
    now = timezone.now()
    tenant = actor.tenant if actor is not None else pause.tenant  # a decider is of the pause's tenant
    fields: dict[str, object] = {
        "state": PauseState.RESUMED,
        "decision": decision,
        "decision_reason": reason,
        "decision_input": decision_input,
        "decided_at": now,
        "on_behalf_of": f"{tenant.slug}/{pause.identity_user}/{pause.identity_session}",
    }
    if actor is not None:
        fields.update(decided_by=actor.user, decided_session=actor.session)
    # Guarded by the state it must still be in: the row count decides, whatever the database's
    # locking does.
    if Pause.objects.filter(pk=pause.pk, state=PauseState.PAUSED).settle(**fields) != 1:
        raise AlreadyResumed("the pause was decided concurrently")
    for name, value in fields.items():
        setattr(pause, name, value)


def pause_decision_refused(*, caller: Caller, method: str, token: object, pause_id: str | None, code: str) -> None:
    """Audit a decision refused before the decision rule saw its pause (a run the caller
    may not see or steer): the pause it names, when the caller's tenant has it."""
    pauses = Pause.objects.filter(tenant=caller.tenant)
    if pause_id is not None:
        pause = pauses.filter(pk=pause_id).first()
    elif isinstance(token, str) and token:
        pause = pauses.filter(token_digest=token_digest(token)).first()
    else:
        pause = None
    _refuse(caller, method, pause, code)


def parked_by_operator(run: Run) -> bool:
    """Whether the run's open pause is an operator's."""
    return run.pauses.filter(state=PauseState.PAUSED, cause=Cause.OPERATOR).exists()


def _refuse(caller: Caller, method: str, pause: Pause | None, code: str) -> None:
    """Audit a refused decision. The surrounding transaction is about to roll back, so the
    record is queued and written once it has (see approvals.domain.refusals)."""
    record = dict(
        actor_tenant=caller.tenant.slug,
        actor_user=caller.user.username,
        actor_session=caller.session,
        address=caller.address,
        pause_id=pause.pk if pause else None,
        method=method,
        code=code,
    )
    log.warning("refused %s by %s on pause %s: %s", method, caller.describe(), record["pause_id"], code)
    refusals.queue(record)
