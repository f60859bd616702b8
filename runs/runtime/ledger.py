"""The tool-call ledger's writes: one row per execution of a tool body, settled once."""

from django.utils import timezone

from runs.models import Run, ToolCall, ToolCallOutcome

from .tools import Tool


def open_attempt(run: Run, tool: Tool, step: int, worker: str) -> ToolCall:
    """A new ledger row for this execution. An earlier attempt still marked running had a
    worker that died (we hold the lease it lost): it is marked lost."""
    now = timezone.now()
    earlier = ToolCall.objects.filter(run=run, step=step)
    earlier.filter(outcome=ToolCallOutcome.RUNNING)._settle(outcome=ToolCallOutcome.LOST, finished_at=now)
    number = earlier.count() + 1
    return ToolCall.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        step=step,
        attempt=number,
        tool=tool.name,
        worker=worker,
        idempotency_key=f"{run.pk}:{step}",
    )


def settle_attempt(attempt: ToolCall, outcome: str, error: str = "") -> None:
    ToolCall.objects.filter(pk=attempt.pk, outcome=ToolCallOutcome.RUNNING)._settle(
        outcome=outcome, error=error[:2000], finished_at=timezone.now()
    )
