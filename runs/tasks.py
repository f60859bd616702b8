"""Thin Celery entry points (production topology). Both are idempotent: a duplicate
delivery finds nothing to claim, or a checkpoint that says the step is done."""

from celery import shared_task
from django.db import close_old_connections

from runs.domain.connection_loss import retry_once_if_lost
from runs.runtime import dispatch as runtime


@shared_task(name="runs.tasks.dispatch")
def dispatch() -> int:
    try:
        return retry_once_if_lost(runtime.drain)  # a look lost with its connection: a wake-up lost
    finally:
        close_old_connections()  # back to the process's pool (CELERY_DB_REUSE_MAX keeps the pool)


@shared_task(name="runs.tasks.sweep")
def sweep() -> None:
    try:
        retry_once_if_lost(runtime.sweep)
    finally:
        close_old_connections()


def wake_a_worker() -> None:
    """The production waker: one dispatch task; never retried here (a broker that is down
    must not hold the request up: the beat-scheduled sweep makes the wake-up good)."""
    dispatch.apply_async(retry=False)
