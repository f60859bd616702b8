"""The Celery entry point of production: drain the outbox, on a commit's nudge and on the
beat (CELERY_BEAT_SCHEDULE's "outbox"), which delivers retries once they are due and makes
up a nudge the broker lost."""

from celery import shared_task
from django.db import close_old_connections

from outbox.delivery import deliver_due


@shared_task(name="outbox.tasks.deliver")
def deliver() -> int:
    try:
        return deliver_due()
    finally:
        close_old_connections()  # back to the process's pool (CELERY_DB_REUSE_MAX keeps the pool)


def nudge() -> None:
    """The "celery" executor's nudge: one drain task; never retried here (a broker that is
    down must not hold the committing request up: the beat drains soon anyway)."""
    deliver.apply_async(retry=False)
