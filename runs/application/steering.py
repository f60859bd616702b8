"""Submit steering: the nine instructions of PROTOCOL §6, checked, recorded once and applied at
once or at the run's next step boundary."""

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from approvals.domain import refusals
from approvals.domain.services import pause_decision_refused, pause_targeted
from runs.domain import events, instructions
from runs.domain.connection_loss import was_lost
from runs.domain.instruction_payloads import payload_clean
from runs.domain.instructions import InstructionSpec, Submission
from runs.domain.payload import check_bounds
from runs.identity.callers import Caller
from runs.identity.scopes import SCOPE_NAMES, caller_scope, can_view_run
from runs.identity.visibility import may_decide_pause
from runs.kernel.errors import (
    HarborError,
    IdentityScopeRequired,
    InvalidRequest,
    NotFound,
    ScopeMismatch,
)
from runs.kernel.ids import new_ulid
from runs.models import Run, SteeringInstruction, SteeringState
from runs.runtime.steering import narrate_control
from runs.runtime.wake import wake_on_commit

log = logging.getLogger("harbor.runs")


@dataclass(frozen=True)
class SteeringReceipt:
    instruction: SteeringInstruction
    replayed: bool


def steering_submit(
    *,
    caller: Caller,
    run_id: str,
    method: str,
    payload: object = None,
    event_id: str | None = None,
    requested_scope: str | None = None,
    pause_id: str | None = None,
    instruction_id: str | None = None,
) -> SteeringReceipt:
    """Submit one of the nine steering instructions, as its spec says (runs.domain.instructions):
    decisions and prioritize apply at once; the rest wait for the run's next step boundary (or
    apply at once to a parked or queued run where that is their whole effect, such as cancel).
    A decision from a page names its pause by `pause_id`; a program's names it by the token in
    its payload. `instruction_id`:
    the id its audit row gets (a request chooses it once: after a lost connection it looks
    for it, `steering_landed`)."""
    spec = instructions.spec_for(method)
    payload = {} if payload is None else payload
    check_bounds(payload)
    if not isinstance(payload, dict):
        raise InvalidRequest("payload must be an object")
    if event_id is not None and (not isinstance(event_id, str) or not 0 < len(event_id) <= 200):
        raise InvalidRequest("event_id must be a string of 1 to 200 characters")
    if requested_scope is not None and requested_scope not in SCOPE_NAMES:
        raise InvalidRequest(f"scope must be one of {', '.join(SCOPE_NAMES)}")
    clean = payload_clean(spec.payload, payload)

    with refusals.collecting():
        try:
            with events.atomic():
                return _submit_locked(
                    caller=caller,
                    run_id=run_id,
                    spec=spec,
                    payload=clean,
                    event_id=event_id,
                    requested_scope=requested_scope,
                    pause_id=pause_id,
                    instruction_id=instruction_id or new_ulid(),
                )
        except HarborError as error:
            _narrate_rejection(caller, run_id, method, error)
            raise


def steering_landed(*, caller: Caller, run_id: str, instruction_id: str) -> bool:
    """Whether the steering instruction a request made landed (its answer was lost): read
    under the run's lock, which waits out a commit still on its way."""
    with events.atomic():
        return (
            _locked_run(caller, run_id) is not None and SteeringInstruction.objects.filter(pk=instruction_id).exists()
        )


def _locked_run(caller: Caller, run_id: str) -> Run | None:
    """The run a control names, in the caller's tenant, under its row lock."""
    return Run.objects.locked().filter(pk=run_id, tenant=caller.tenant).first()


def _submit_locked(
    *,
    caller: Caller,
    run_id: str,
    spec: InstructionSpec,
    payload: dict[str, Any],
    event_id: str | None,
    requested_scope: str | None,
    pause_id: str | None,
    instruction_id: str,
) -> SteeringReceipt:
    method = spec.name
    refused = partial(_refused, caller=caller, spec=spec, token=payload.get("token"), pause_id=pause_id)
    run = _locked_run(caller, run_id) if isinstance(run_id, str) else None
    if run is None or not can_view_run(caller, run):
        raise refused(NotFound("no such run"))
    if requested_scope is not None and caller_scope(caller, run) < SCOPE_NAMES[requested_scope]:
        raise refused(IdentityScopeRequired(f"the caller does not hold the {requested_scope} scope on this run"))
    # A decision's pause, locked once: whoever may decide it (its pausing session, a role its
    # cause names, a delegate) reaches the decision rule, which re-checks everything.
    target = None
    if spec.decides_pause:
        target = pause_targeted(run=run, token=payload.get("token"), pause_id=pause_id)
    may_decide = target is not None and may_decide_pause(caller, target)
    if not may_decide and caller_scope(caller, run) < spec.scope:
        raise refused(ScopeMismatch(f"{method} needs the {spec.scope.name.lower()} scope"))
    # A replayed event_id is answered only to a caller allowed the method: the receipt
    # names the earlier instruction, which is not everyone's to learn. The same id on
    # another control is refused, not taken for the earlier one (a cancel silently dropped).
    if event_id is not None:
        earlier = SteeringInstruction.objects.filter(run=run, event_id=event_id).first()
        if earlier is not None:
            if not _same_control(earlier, method, payload):
                raise InvalidRequest(
                    f"event_id {event_id!r} was used on this run for another control ({earlier.instruction})"
                )
            return SteeringReceipt(earlier, replayed=True)
    if run.is_terminal and not spec.decides_pause:
        raise NotFound(f"the run is {run.status}")
    if spec.lock_first is not None:
        spec.lock_first(run)

    narrate_control(run, events.CONTROL_RECEIVED, method, "received")
    submission = Submission(caller=caller, run=run, payload=payload, pause_id=pause_id, target=target)
    applied = spec.apply_now(submission) if spec.apply_now is not None else None
    if applied is None:  # the rest waits for the run's next step boundary (a parked run's: after it resumes)
        fields: dict[str, object] = {"steering_pending": True}
        if run.queued_at > timezone.now():  # a step put off (a full bound) is taken now, to apply it
            fields["queued_at"] = timezone.now()
            wake_on_commit()
        Run.objects.filter(pk=run.pk).update(**fields)
        return SteeringReceipt(_instruction(caller, run, instruction_id, method, payload, event_id), replayed=False)
    # Applied at once: the audit row is written settled.
    audited = payload if applied.audited is None else applied.audited
    instruction = _instruction(caller, run, instruction_id, method, audited, event_id, applied=True)
    narrate_control(run, events.CONTROL_APPLIED, method, SteeringState.APPLIED)
    if applied.then is not None:
        applied.then()
    return SteeringReceipt(instruction, replayed=False)


def _audited(payload: dict[str, Any]) -> dict[str, Any]:
    """What the audit keeps of a payload: never a resume token, even a spent one (the
    audit names the pause instead)."""
    return {k: v for k, v in payload.items() if k != "token"}


def _same_control(earlier: SteeringInstruction, method: str, payload: dict[str, Any]) -> bool:
    """Whether a control replays `earlier` (its event_id's first use), as its audit kept it."""
    kept = _audited(payload)
    if earlier.payload.get("input") == events.SEALED and "input" in kept:
        kept["input"] = events.SEALED  # a credential, kept sealed: compared as such
    return (earlier.instruction, earlier.payload) == (method, kept)


def _refused(
    error: HarborError, *, caller: Caller, spec: InstructionSpec, token: object, pause_id: str | None
) -> HarborError:
    """A decision refused before its pause is looked at (a run the caller may not see or
    steer) is audited, and throttled, as one the decision rule refuses."""
    if spec.decides_pause:
        pause_decision_refused(caller=caller, method=spec.name, token=token, pause_id=pause_id, code=error.code)
    return error


def _instruction(
    caller: Caller,
    run: Run,
    instruction_id: str,
    method: str,
    payload: dict[str, Any],
    event_id: str | None,
    *,
    applied: bool = False,
) -> SteeringInstruction:
    now = timezone.now()
    instruction = SteeringInstruction(
        id=instruction_id,
        tenant=caller.tenant,
        run=run,
        instruction=method,
        payload=_audited(payload),
        event_id=event_id,
        actor=caller.user,
        actor_session=caller.session,
        state=SteeringState.APPLIED if applied else SteeringState.PENDING,
        created_at=now,
        settled_at=now if applied else None,
    )
    instruction.save(force_insert=True)
    return instruction


def _narrate_rejection(caller: Caller, run_id: object, method: str, error: HarborError) -> None:
    """The stream narrates refused controls too (control.received then control.rejected),
    on runs the caller can see (a wrong token's 404 included); the refused change itself
    was rolled back."""
    if not isinstance(run_id, str):
        return
    try:
        with events.atomic():
            # Run lock first, as everywhere: writing an event for a run while another
            # transaction holds that run would otherwise deadlock on the tenant's cursor.
            run = _locked_run(caller, run_id)
            if run is None or not can_view_run(caller, run):
                return
            narrate_control(run, events.CONTROL_RECEIVED, method, "received")
            narrate_control(run, events.CONTROL_REJECTED, method, "rejected", error.code)
    except (OperationalError, InterfaceError) as lost:
        if not was_lost(lost):
            raise
        # The narration may have landed: the refusal is still the answer (answered again,
        # the request would narrate it twice).
        log.warning("run %s: the narration of a refused %s was lost with its connection (%s)", run_id, method, lost)
        connection.close()
