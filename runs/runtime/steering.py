"""Steering as the runtime applies it: pending instructions at a step boundary, and cancels
(at once for a run no worker holds) with their cascade to child runs. Run lock held."""

from django.utils import timezone

from approvals.domain.services import pause_cancel_open, run_cancel_unparked
from runs.domain import events, instructions
from runs.domain.event_types import Control
from runs.domain.transitions import save_run
from runs.models import LIVE_RUN_STATUSES, CancelPolicy, Instruction, Run, RunStatus, SteeringInstruction, SteeringState

from .wake import wake_on_commit


def settle_instruction(instruction: SteeringInstruction, run: Run, state: str, outcome: str = "") -> None:
    SteeringInstruction.objects.filter(pk=instruction.pk, state=SteeringState.PENDING).settle(
        state=state, outcome=outcome, settled_at=timezone.now()
    )
    narrate_control(
        run,
        events.CONTROL_APPLIED if state == SteeringState.APPLIED else events.CONTROL_REJECTED,
        instruction.instruction,
        state,
        outcome,
    )


def narrate_control(run: Run, type: str, method: str, outcome: str, err: str = "") -> None:
    events.emit(run=run, type=type, payload=Control(Type=method.upper(), Outcome=outcome, Err=err))


def lock_cascade(run: Run) -> list[Run]:
    """Lock the live descendants a cancel of `run` reaches, level by level in id order,
    before anything is written: the tenant's event cursor must be the last lock a
    transaction takes, or a child's worker (holding the child, wanting the cursor) and this
    cancel (holding the cursor, wanting the child) deadlock. The status filter is re-checked
    on the locked rows, so a child that ended meanwhile is simply not among them."""
    locked, level = [], [run.pk]
    while level:
        children = list(
            Run.objects.select_for_update(no_key=True)
            .filter(parent_id__in=level, status__in=LIVE_RUN_STATUSES, cancel_policy=CancelPolicy.CASCADE)
            .order_by("pk")
        )
        locked.extend(children)
        level = [child.pk for child in children]
    return locked


def run_cancel_now(run: Run, *, reason: str, cascaded: bool) -> None:
    """Terminate a run (lock held) and cascade to live children that did not opt out.
    The caller has taken `lock_cascade(run)` before writing anything."""
    run.hard_cancel = False  # written with the end: no later attempt of it is interrupted
    if run.status == RunStatus.PAUSED:
        pause_cancel_open(run=run, reason=reason, cascaded=cascaded)
    else:
        run_cancel_unparked(run=run, reason=reason, cascaded=cascaded)
    children = (
        Run.objects.select_for_update(no_key=True)
        .filter(parent=run, status__in=LIVE_RUN_STATUSES, cancel_policy=CancelPolicy.CASCADE)
        .order_by("pk")
    )
    for child in children:
        if child.status == RunStatus.RUNNING:
            # A child mid-step stops at its own next boundary.
            SteeringInstruction.objects.create(
                tenant_id=child.tenant_id,
                run=child,
                instruction=Instruction.CANCEL,
                payload={"cascaded_from": run.pk},
                actor=run.owner,
                actor_session=run.session,
            )
            Run.objects.filter(pk=child.pk).update(steering_pending=True)
            wake_on_commit()
        else:
            run_cancel_now(child, reason=f"parent run {run.pk} cancelled", cascaded=True)


def steering_apply_pending(run: Run) -> str | None:
    """Apply pending steering in arrival order at a step boundary (run lock held).
    Returns 'cancel' or 'pause' when the run must stop advancing."""
    stop, cascaded, hard = None, False, False
    pending = list(SteeringInstruction.objects.filter(run=run, state=SteeringState.PENDING).order_by("id"))
    if any(instruction.instruction == Instruction.CANCEL for instruction in pending):
        lock_cascade(run)
    for instruction in pending:
        method, payload = instruction.instruction, instruction.payload
        # A cancel still ends a run an earlier pause would only have parked.
        if stop == Instruction.CANCEL or (stop == Instruction.PAUSE and method != Instruction.CANCEL):
            settle_instruction(instruction, run, SteeringState.REJECTED, f"run stopped by an earlier {stop}")
            continue
        apply = instructions.spec_for(method).apply_at_boundary
        halt = apply(run, payload) if apply is not None else None
        if halt is not None:
            stop, cascaded, hard = halt, "cascaded_from" in payload, bool(payload.get("hard"))
        settle_instruction(instruction, run, SteeringState.APPLIED)
    # Every pending instruction is settled: a hard cancel among them ends the run below, and
    # the flag must not outlive it (each later attempt would be interrupted at once).
    run.steering_pending, run.hard_cancel = False, False
    save_run(run)
    if stop == Instruction.CANCEL:
        reason = "hard-cancelled: any step in flight interrupted" if hard else "cancelled at a step boundary"
        run_cancel_now(run, reason=reason, cascaded=cascaded)
    return stop
