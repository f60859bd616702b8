"""How hard the outbox tries: attempts, backoff and the deliverer's lease (settings)."""

from datetime import timedelta

from django.conf import settings


def max_attempts() -> int:
    return max(1, int(settings.HARBOR_OUTBOX_MAX_ATTEMPTS))


def backoff(attempt: int) -> timedelta:
    """The wait after failed attempt `attempt` (1, 2, ...): doubling from the base, capped."""
    base = float(settings.HARBOR_OUTBOX_BACKOFF_SECONDS)
    cap = float(settings.HARBOR_OUTBOX_BACKOFF_MAX_SECONDS)
    return timedelta(seconds=min(base * 2 ** min(attempt - 1, 32), cap))


def lease() -> timedelta:
    """How long a claimed message stays out of other deliverers' reach: past it, a
    deliverer that died is taken for dead and the message is due again."""
    return timedelta(seconds=float(settings.HARBOR_OUTBOX_LEASE_SECONDS))
