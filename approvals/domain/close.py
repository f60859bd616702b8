"""Closing a pause without a decision (a cancel, a deadline passed, a sign-in refused
upstream), and what a cancelled run still owes. What closing does for a cause is its
registration's (approvals.causes). Run lock held."""

from datetime import datetime

from django.utils import timezone

from approvals import causes
from approvals.models import Decision, Pause, PauseState
from runs.domain import events
from runs.domain.event_types import PauseResumed
from runs.domain.transitions import run_cancelled, run_reject
from runs.models import Run

from .decide import pause_settle


def pause_close(*, run: Run, pause: Pause, decision: str, reason: str = "") -> None:
    """Resolve an open pause without a human decision (timeout, cancel, a refused sign-in).
    Run lock held."""
    pause_settle(pause, decision, actor=None, reason=reason, decision_input=None)
    causes.get(pause.cause).on_cancel(pause)  # A2A: the remote task ends with ours
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


def run_cancel_unparked(*, run: Run, reason: str, cascaded: bool) -> None:
    """Cancel a run that is not parked (queued, or running between steps): what a cause's
    tool still owes for it ends with it (A2A: the remote task of a call waiting to run
    again), then the run. Run lock held."""
    for cause in causes.active().all():
        cause.on_run_cancel(run)
    run_cancelled(run, reason, cascaded)
