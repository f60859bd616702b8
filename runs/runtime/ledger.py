"""The tool-call ledger's writes: one row per execution of a tool body, settled once (an
attempt opened by a hand-off that steering reached before its body began is settled
`interrupted`, never run: runs.runtime.handoff)."""

from django.utils import timezone

from runs.domain import events
from runs.domain.rows import RUNS, TOOL_CALLS
from runs.models import Run, ToolCall, ToolCallOutcome

from .tools import Tool


def call_key(run_id: str, step: int) -> str:
    """A step's call's idempotency key: the same for every attempt of it, on any worker."""
    return f"{run_id}:{step}"


def open_attempt(run: Run, tool: Tool, step: int, worker: str) -> ToolCall:
    """A new ledger row for this execution of the run's pending call (the caller holds the
    run's lock), numbered after the step's earlier attempts by the count the call keeps in
    the checkpoint: both are written as the transaction ends, together. (A pending call
    checkpointed before it kept a count is numbered by the INSERT, from the ledger.) The
    attempt before it, if it is still marked running, had a worker that died (we hold the
    lease it lost): it is marked lost. Each opening settles the one before, so no older
    one is running."""
    pending = run.checkpoint["pending_call"]
    attempt = ToolCall(
        tenant_id=run.tenant_id,
        run=run,
        step=step,
        tool=tool.name,
        worker=worker,
        idempotency_key=call_key(run.pk, step),
    )
    if "attempts" in pending:
        attempt.attempt = pending["attempts"] + 1
        events.at_end(TOOL_CALLS, attempt)
    else:
        TOOL_CALLS.insert(attempt, numbered=("attempt", ("run", "step")))
    run.checkpoint = {**run.checkpoint, "pending_call": {**pending, "attempts": attempt.attempt}}
    events.at_end(RUNS, run)
    if attempt.attempt > 1:
        lose_dead_attempt(run, step, attempt.attempt - 1)
    return attempt


def lose_dead_attempt(run: Run, step: int, attempt: int) -> None:
    """Mark the attempt lost if it is still marked running: its worker died (the caller
    holds the run's lock and the lease that worker lost)."""
    TOOL_CALLS.update_where(
        {"run": run, "step": step, "attempt": attempt, "outcome": ToolCallOutcome.RUNNING},
        outcome=ToolCallOutcome.LOST,
        finished_at=timezone.now(),
    )


def settle_attempt_at_end(attempt: ToolCall, outcome: str, refused: Exception, error: str = "") -> None:
    """Settle the attempt with the rest of its transaction's writes (runs.domain.events), the
    caller holding the run's lock and its lease: `refused` is raised, and the transaction
    rolls back, if it was settled already (another worker took the step over)."""
    where, values = _settle(attempt, outcome, error)
    events.settle_at_end(TOOL_CALLS.settling(where, refused, **values))


def settle_attempt(attempt: ToolCall, outcome: str, error: str = "") -> bool:
    """Settle the attempt if it is still running; False if it was settled already (another
    worker took the step over and marked it lost)."""
    where, values = _settle(attempt, outcome, error)
    return TOOL_CALLS.update_where(where, **values) == 1


def _settle(attempt: ToolCall, outcome: str, error: str) -> tuple[dict[str, object], dict[str, object]]:
    """The settle's guard (still running) and what it writes."""
    return (
        {"pk": attempt.pk, "outcome": ToolCallOutcome.RUNNING},
        {"outcome": outcome, "error": error[:2000], "finished_at": timezone.now()},
    )
