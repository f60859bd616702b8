"""Run status changes. Callers hold the run's row lock (select_for_update) inside a
transaction; this module checks the transition table and narrates each change."""

import logging
from functools import partial

from django.db import transaction
from django.utils import timezone

from runs.domain import events, handles
from runs.domain.event_types import Control, TaskCancelled, TaskCompleted, TaskFailed
from runs.kernel.errors import HarborError
from runs.models import (
    RUN_TRANSITIONS,
    TERMINAL_RUN_STATUSES,
    FailureCode,
    Run,
    RunStatus,
    SteeringInstruction,
    SteeringState,
)

log = logging.getLogger("harbor.runs")


class IllegalTransition(HarborError):
    code = "runtime_error"


# What the services and the runtime change on a run, under its row lock; its identity
# (tenant, owner, session, agent, parent, created_at) never changes.
RUN_STATE = [
    "status",
    "goal",
    "priority",
    "context",
    "messages",
    "checkpoint",
    "answer",
    "failure_code",
    "failure_message",
    "steering_pending",
    "hard_cancel",
    "lease_owner",
    "lease_expires_at",
    "queued_at",
    "started_at",
    "finished_at",
    "updated_at",
]


def save_run(run: Run) -> None:
    """Write the run's state as the caller (holding its row lock) left it."""
    run.save(update_fields=RUN_STATE)


def move(run: Run, to: str, **fields: object) -> None:
    """Change the run's status (and `fields`), and write it."""
    if to not in RUN_TRANSITIONS[run.status]:
        raise IllegalTransition(f"run {run.pk} cannot go from {run.status} to {to}")
    run.status = to
    now = timezone.now()
    if to == RunStatus.RUNNING and run.started_at is None:
        run.started_at = now
    if to in TERMINAL_RUN_STATUSES:
        if run.steering_pending:
            _reject_waiting_steering(run, to)
        run.finished_at = now
        run.lease_owner, run.lease_expires_at = "", None
        run.steering_pending = False
        # However the run ended (done, failed, cancelled, rejected, timed out), the live
        # handles this process holds for it are closed; other processes reap theirs.
        transaction.on_commit(partial(handles.release_run, run.pk))
    for name, value in fields.items():
        setattr(run, name, value)
    save_run(run)


def _reject_waiting_steering(run: Run, status: str) -> None:
    """Steering still waiting for a step boundary the run will never reach (sent while it
    was parked or queued, then it ended) is settled rejected, and narrated."""
    waiting = SteeringInstruction.objects.filter(run=run, state=SteeringState.PENDING)
    methods = list(waiting.order_by("pk").values_list("instruction", flat=True))
    why = f"the run is {status}"
    waiting.settle(state=SteeringState.REJECTED, outcome=why, settled_at=timezone.now())
    for method in methods:
        payload = Control(Type=method.upper(), Outcome=SteeringState.REJECTED, Err=why)
        events.emit(run=run, type=events.CONTROL_REJECTED, payload=payload)


def run_complete(run: Run, answer: str) -> None:
    move(run, RunStatus.COMPLETE, answer=answer)
    events.emit(run=run, type=events.TASK_COMPLETED, payload=TaskCompleted(TaskID=run.pk, Answer=answer))


def run_fail(run: Run, code: str, message: str) -> None:
    move(run, RunStatus.FAILED, failure_code=code, failure_message=message)
    events.emit(run=run, type=events.TASK_FAILED, payload=TaskFailed(TaskID=run.pk, Code=code, Message=message))
    log.info("run %s failed: %s %s", run.pk, code, message)


def run_reject(run: Run, message: str) -> None:
    run_fail(run, FailureCode.CONSTRAINTS_CONFLICT, message)


def run_cancelled(run: Run, reason: str, cascaded: bool) -> None:
    move(run, RunStatus.CANCELLED, failure_message=reason)
    events.emit(
        run=run, type=events.TASK_CANCELLED, payload=TaskCancelled(TaskID=run.pk, Reason=reason, Cascaded=cascaded)
    )
