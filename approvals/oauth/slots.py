"""How many provider calls one process makes at once: in all (HARBOR_OAUTH_CALLS_AT_ONCE)
and per provider (HARBOR_OAUTH_CALLS_PER_PROVIDER). A callback trades its code in a request
thread; without a bound, slow providers could hold every request thread and nothing else
(/healthz, /v1, the pages) would answer. A call beyond the bound does not wait for a slot:
it fails at once (ProviderBusy), and the person tries again in a moment."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from django.conf import settings


class ProviderBusy(Exception):
    """Every slot for provider calls (or for this provider's) is taken."""


_lock = threading.Lock()
_in_flight: dict[str, int] = {}  # per provider (its host and port)
_ALL = ""  # the key of the count over every provider


def _provider(url: str) -> str:
    return urlsplit(url).netloc.lower() or url


@contextmanager
def provider_slot(url: str) -> Iterator[None]:
    """Hold a slot for one call to the provider serving `url`, or raise ProviderBusy."""
    provider = _provider(url)
    with _lock:
        if _in_flight.get(_ALL, 0) >= settings.HARBOR_OAUTH_CALLS_AT_ONCE:
            raise ProviderBusy("too many sign-ins are in progress")
        if _in_flight.get(provider, 0) >= settings.HARBOR_OAUTH_CALLS_PER_PROVIDER:
            raise ProviderBusy("too many sign-ins with this provider are in progress")
        for key in (_ALL, provider):
            _in_flight[key] = _in_flight.get(key, 0) + 1
    try:
        yield
    finally:
        with _lock:
            for key in (_ALL, provider):
                _in_flight[key] -= 1
                if not _in_flight[key]:
                    del _in_flight[key]
