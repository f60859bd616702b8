"""Refused decisions are audited even though the transaction that found them rolls back:
they are queued while the service runs and written after it unwinds."""

import contextlib
from contextvars import ContextVar

_queue: ContextVar[list | None] = ContextVar("harbor_refusals", default=None)


def queue(record: dict) -> None:
    pending = _queue.get()
    if pending is None:
        _write([record])
    else:
        pending.append(record)


@contextlib.contextmanager
def collecting():
    token = _queue.set([])
    try:
        yield
    finally:
        pending = _queue.get() or []
        _queue.reset(token)
        if pending:
            _write(pending)


def _write(records: list[dict]) -> None:
    from approvals.models import DecisionRefusal

    DecisionRefusal.objects.bulk_create([DecisionRefusal(**r) for r in records])
