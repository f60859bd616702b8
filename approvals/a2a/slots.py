"""A bound on remote calls in flight, per tenant and per agent host, across every worker
process: a call takes a numbered slot row in both scopes before it goes out and gives them
back when it ends. A slot's number is unique in its scope, so two workers can never both
take the last one; a holder renews its slots while it waits, and a dead holder's lapse.

A call that finds no free slot does not wait holding its worker: after a short look it
raises TryLater, and the run gives its worker back (docs/adr/0004)."""

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import RemoteCallSlot

LOOK_SECONDS = 1.0  # how long a call looks for a free slot before it gives its worker back


class NoFreeSlot(Exception):
    """Every slot of a scope is held: the message says which bound is full."""


def scopes(tenant_id: int, card_url: str) -> dict[str, int]:
    """The bounds a call to the agent at `card_url` for the tenant counts against."""
    parts = urlsplit(card_url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return {
        f"tenant:{tenant_id}": settings.HARBOR_A2A_MAX_CALLS_PER_TENANT,
        f"peer:{parts.hostname}:{port}": settings.HARBOR_A2A_MAX_CALLS_PER_PEER,
    }


def lapse() -> timedelta:
    """How long a slot outlives its holder's last renewal: the run lease's length."""
    return timedelta(seconds=settings.HARBOR_LEASE_SECONDS)


def take(bounds: dict[str, int]) -> str:
    """A slot in every scope of `bounds`, all or none: the holder id to give them back by,
    or NoFreeSlot."""
    holder, now = uuid.uuid4().hex, timezone.now()
    with transaction.atomic():
        RemoteCallSlot.objects.filter(scope__in=bounds, expires_at__lt=now).delete()
        for scope, bound in bounds.items():
            held = set(RemoteCallSlot.objects.filter(scope=scope).values_list("number", flat=True))
            free = next((number for number in range(bound) if number not in held), None)
            if free is None:
                raise NoFreeSlot(f"{bound} remote call(s) already in flight for {scope.replace(':', ' ', 1)}")
            try:
                with transaction.atomic():  # another worker took that number meanwhile: full for now
                    RemoteCallSlot.objects.create(scope=scope, number=free, holder=holder, expires_at=now + lapse())
            except IntegrityError:
                raise NoFreeSlot(f"the last free slot for {scope.replace(':', ' ', 1)} was just taken") from None
    return holder


def take_soon(bounds: dict[str, int], *, sleep: Callable[[float], None], seconds: float = LOOK_SECONDS) -> str:
    """`take`, looking again for up to `seconds` (`sleep` notices a cancel)."""
    waited = 0.0
    while True:
        try:
            return take(bounds)
        except NoFreeSlot:
            if waited >= seconds:
                raise
        sleep(0.2)
        waited += 0.2


def renew(holder: str) -> None:
    RemoteCallSlot.objects.filter(holder=holder).update(expires_at=timezone.now() + lapse())


def give_back(holder: str) -> None:
    RemoteCallSlot.objects.filter(holder=holder).delete()


def in_flight(scope: str) -> int:
    return RemoteCallSlot.objects.filter(scope=scope, expires_at__gte=timezone.now()).count()


class Held:
    """Slots this call holds: `keep()`, called often while it waits, renews them now and then."""

    def __init__(self, holder: str) -> None:
        self.holder, self._renewed = holder, time.monotonic()

    def keep(self) -> None:
        if time.monotonic() - self._renewed >= lapse().total_seconds() / 3:
            self._renewed = time.monotonic()
            renew(self.holder)


@contextmanager
def held(bounds: dict[str, int], *, sleep: Callable[[float], None]) -> Iterator[Held]:
    """Slots in every scope of `bounds` while the block runs (NoFreeSlot if none is free soon)."""
    holding = Held(take_soon(bounds, sleep=sleep))
    try:
        yield holding
    finally:
        give_back(holding.holder)
