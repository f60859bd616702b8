"""Thin Celery entry points (production topology). Both are idempotent: a duplicate
delivery finds nothing to claim, or a checkpoint that says the step is done."""

from celery import shared_task

from runs.runtime import dispatch as runtime


@shared_task(name="runs.tasks.dispatch")
def dispatch() -> int:
    return runtime.drain()


@shared_task(name="runs.tasks.sweep")
def sweep() -> None:
    runtime.sweep()


def wake_a_worker() -> None:
    """The production waker: one dispatch task; never retried here (a broker that is down
    must not hold the request up: the beat-scheduled sweep makes the wake-up good)."""
    dispatch.apply_async(retry=False)
