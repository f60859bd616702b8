"""Refused decisions are audited even though the transaction that found them rolls back:
they are queued while the service runs and written after it unwinds."""

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_queue: ContextVar[list[dict[str, Any]] | None] = ContextVar("harbor_refusals", default=None)


def queue(record: dict[str, Any]) -> None:
    pending = _queue.get()
    if pending is None:
        _write([record])
    else:
        pending.append(record)


@contextlib.contextmanager
def collecting() -> Iterator[None]:
    token = _queue.set([])
    try:
        yield
    finally:
        pending = _queue.get() or []
        _queue.reset(token)
        if pending:
            _write(pending)


def _write(records: list[dict[str, Any]]) -> None:
    from approvals.models import DecisionRefusal

    DecisionRefusal.objects.bulk_create([DecisionRefusal(**r) for r in records])
