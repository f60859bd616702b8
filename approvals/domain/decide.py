"""Deciding a pause: approve, reject or resume, by a person or a program, exactly once.
What each cause takes, who may decide it, what its answer becomes and what its resolving
does are its registration's (approvals.causes).

Lock order is always run, then pause. Callers that decide hold the run's row lock."""

import logging
from typing import Any

from django.utils import timezone

from approvals import causes
from approvals.causes import GATE_DECISIONS
from approvals.domain import refusals
from approvals.domain.quorum import approval_count, pause_rule, rule_for_arguments
from approvals.models import Decision, Pause, PauseState
from approvals.policy import ApprovalRule, decision_refusal
from runs.domain import events
from runs.domain.arguments import arguments_problems, arguments_refused
from runs.domain.event_types import PauseResumed, ToolDecided
from runs.domain.tokens import token_digest
from runs.domain.transitions import move, run_reject
from runs.identity.callers import Caller
from runs.identity.visibility import may_decide_pause, may_view_pause
from runs.kernel.errors import AlreadyResumed, InvalidRequest, NotFound, PayloadInvalid, ScopeMismatch
from runs.models import Run, RunStatus

log = logging.getLogger("harbor.approvals")

DECISION_FOR_METHOD = {"approve": Decision.APPROVE, "reject": Decision.REJECT, "resume": Decision.RESUME}
NO_OPEN_PAUSE = "no open pause matches for this caller"


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
    if pause.expires_at is not None and pause.expires_at <= timezone.now():
        # Past its deadline it is the sweep's to time out, whoever asks first (PROTOCOL §4).
        raise AlreadyResumed(f"the pause expired at {pause.expires_at.isoformat(timespec='seconds')}")
    spec = causes.get(pause.cause)
    if decision not in spec.decisions:
        # No open pause of the kind the method decides (PROTOCOL §3: approve and reject clear
        # a gate, resume the run's non-gate pause).
        raise NotFound(
            "approve and reject decide approval gates; resume releases the other pauses"
            f" (a {pause.cause} pause takes {' or '.join(sorted(spec.decisions))})"
        )
    if reason is not None and not isinstance(reason, str):
        raise PayloadInvalid("reason must be a string")
    rule = pause_rule(pause) if spec.is_gate else None
    _rule_check(caller, method, pause, rule, reason=reason or "")
    final_args = _approved_args(pause, args) if decision == Decision.APPROVE else None
    if decision != Decision.APPROVE and args is not None:
        raise PayloadInvalid("args may only accompany approve")
    if final_args is not None and spec.is_gate:
        edited = rule_for_arguments(pause, rule, final_args)  # an edit may bring a stricter rule
        if edited is not None and edited.rule != rule:
            rule = edited.rule
            _rule_check(caller, method, pause, rule, reason=reason or "")
        if rule is not None and not approval_count(
            pause,
            rule,
            caller=caller,
            args=final_args,
            reason=reason or "",
            version=edited.version if edited is not None else None,
        ):
            return pause  # short of the quorum: the gate stays open, the run parked

    input = spec.answer(pause, input)  # A2A: what the remote agent gets, bounded, never empty
    pause_settle(pause, decision, actor=caller, reason=reason or "", decision_input=input)
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
    else:
        _go_on(run, pause, decision, args=final_args, input=input, reason=reason or "")
    spec.on_resolve(pause)
    return pause


def _rule_check(caller: Caller, method: str, pause: Pause, rule: ApprovalRule | None, *, reason: str) -> None:
    """Refuse a decision the gate's rule does not allow: a person it excludes (audited like
    every refusal), or a reason it requires and the decision lacks."""
    if rule is None:
        return
    refusal = decision_refusal(rule, tenant=pause.tenant, person=caller.user, requester=pause.identity_user)
    if refusal is not None:
        _refuse(caller, method, pause, "scope_mismatch")
        raise ScopeMismatch(f"{refusal} (rule {rule.name})")
    if rule.reason_needed(method) and not reason.strip():
        raise PayloadInvalid(f"a reason is required to {method} under rule {rule.name}")


def _go_on(run: Run, pause: Pause, decision: str, *, args: dict[str, Any] | None, input: object, reason: str) -> None:
    """The run goes on with the decision in its checkpoint (its planner or the same call
    reads it at the next step)."""
    checkpoint = dict(run.checkpoint)
    if decision == Decision.APPROVE and checkpoint.get("pending_call"):
        # The approval travels with the call it approves, so an operator pause (or any
        # other park) before the call runs cannot drop it: the gate opens once.
        checkpoint["pending_call"] = {**checkpoint["pending_call"], "args": args, "approved": pause.pk}
    checkpoint["resolution"] = {"pause": pause.pk, "decision": decision, "args": args, "input": input, "reason": reason}
    move(run, RunStatus.RUNNING, checkpoint=checkpoint, queued_at=timezone.now())


def pause_settle(pause: Pause, decision: str, *, actor: Caller | None, reason: str, decision_input: object) -> None:
    """Settle an open pause with its decision (`actor`: who took it; None: nobody did)."""
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
    schema = pause.payload.get("ArgsSchema")
    if isinstance(schema, dict):
        # The tool's own schema, stored with the gate: an edit approves only valid arguments.
        merged = {**original, **args}
        problems = arguments_problems(schema, merged)
        if problems:
            raise arguments_refused(pause.tool, problems)
        return merged
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
