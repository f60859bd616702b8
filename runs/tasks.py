"""Thin Celery entry points (production topology). Both are idempotent: a duplicate
delivery finds nothing to claim, or a checkpoint that says the step is done."""

from celery import shared_task

from .runtime import dispatch as runtime


@shared_task(name="runs.tasks.dispatch")
def dispatch() -> int:
    return runtime.drain()


@shared_task(name="runs.tasks.sweep")
def sweep() -> None:
    runtime.sweep()
