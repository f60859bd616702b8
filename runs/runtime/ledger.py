"""The tool-call ledger's writes: one row per execution of a tool body, opened under the run's
lock before the body starts and settled once, by its natural key (run, step, attempt)."""

from django.db.models import Max
from django.utils import timezone

from runs.models import Run, ToolCall, ToolCallOutcome

from .tools import Tool


def call_key(run_id: str, step: int) -> str:
    """A step's call's idempotency key: the same for every attempt of it, on any worker."""
    return f"{run_id}:{step}"


def open_attempt(run: Run, tool: Tool, step: int, worker: str, attempt_id: str) -> ToolCall:
    """A new ledger row for this execution of the run's pending call (run lock held), with
    the key the worker made for it (`attempt_id`), numbered after the step's earlier
    attempts, which the pending call counts in the checkpoint (written with each attempt, under
    the same lock; a call checkpointed before it kept a count is numbered from the ledger). An
    earlier one still marked running had a worker that died (we hold the lease it lost): it
    is marked lost."""
    pending = run.checkpoint.get("pending_call") or {}
    earlier = pending["attempts"] if "attempts" in pending else _last_attempt(run, step)
    if earlier:
        lose_dead_attempt(run, step, earlier)
    attempt = ToolCall(
        id=attempt_id,
        tenant_id=run.tenant_id,
        run=run,
        step=step,
        attempt=earlier + 1,
        tool=tool.name,
        worker=worker,
        idempotency_key=call_key(run.pk, step),
    )
    attempt.save(force_insert=True)
    return attempt


def _last_attempt(run: Run, step: int) -> int:
    return ToolCall.objects.filter(run=run, step=step).aggregate(last=Max("attempt"))["last"] or 0


def lose_dead_attempt(run: Run, step: int, attempt: int) -> None:
    """Mark the attempt lost if it is still marked running: its worker died (the caller
    holds the run's lock and the lease that worker lost)."""
    ToolCall.objects.filter(run=run, step=step, attempt=attempt, outcome=ToolCallOutcome.RUNNING).settle(
        outcome=ToolCallOutcome.LOST, finished_at=timezone.now()
    )


def settle_attempt(attempt: ToolCall, outcome: str, error: str = "") -> bool:
    """Settle the attempt if it is still running, by (run, step, attempt); False if it was
    settled already (another worker took the step over and marked it lost)."""
    settled = ToolCall.objects.filter(
        run_id=attempt.run_id, step=attempt.step, attempt=attempt.attempt, outcome=ToolCallOutcome.RUNNING
    ).settle(outcome=outcome, error=error[:2000], finished_at=timezone.now())
    return settled == 1


def outcome_of(attempt: ToolCall) -> str | None:
    """The attempt's outcome as committed (None: no such row)."""
    return (
        ToolCall.objects.filter(run_id=attempt.run_id, step=attempt.step, attempt=attempt.attempt)
        .values_list("outcome", flat=True)
        .first()
    )
