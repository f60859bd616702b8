"""The tool-call ledger's writes: one row per execution of a tool body, settled once."""

from django.utils import timezone

from runs.domain.rows import TOOL_CALLS
from runs.models import Run, ToolCall, ToolCallOutcome

from .tools import Tool


def open_attempt(run: Run, tool: Tool, step: int, worker: str, *, opened: int | None) -> ToolCall:
    """A new ledger row for this execution. `opened` is how many attempts the pending call
    has had (its checkpoint counts them in the transaction that opens each; None: not
    counted, so the ledger is). An earlier attempt still marked running had a worker that
    died (we hold the lease it lost): it is marked lost."""
    if opened != 0:  # the first attempt has no earlier one to look for
        TOOL_CALLS.update_where(
            {"run": run, "step": step, "outcome": ToolCallOutcome.RUNNING},
            outcome=ToolCallOutcome.LOST,
            finished_at=timezone.now(),
        )
    number = (ToolCall.objects.filter(run=run, step=step).count() if opened is None else opened) + 1
    return TOOL_CALLS.insert(
        ToolCall(
            tenant_id=run.tenant_id,
            run=run,
            step=step,
            attempt=number,
            tool=tool.name,
            worker=worker,
            idempotency_key=f"{run.pk}:{step}",
        )
    )


def settle_attempt(attempt: ToolCall, outcome: str, error: str = "") -> bool:
    """Settle the attempt if it is still running; False if it was settled already (another
    worker took the step over and marked it lost)."""
    settled = TOOL_CALLS.update_where(
        {"pk": attempt.pk, "outcome": ToolCallOutcome.RUNNING},
        outcome=outcome,
        error=error[:2000],
        finished_at=timezone.now(),
    )
    return settled == 1
