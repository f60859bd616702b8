"""Every call to an OAuth provider is bounded, against hostile providers that are real
servers on loopback (tests/oauth/hostile.py): a total deadline however slowly the answer
comes, a cap on its size, a bound on the calls in flight, and token answers checked before
anything is kept."""

import threading
import time
from dataclasses import replace

import pytest

from approvals.oauth import client
from approvals.oauth.credentials import access_token, credential_store
from approvals.oauth.models import OAuthCredential
from approvals.oauth.sealing import unseal
from approvals.oauth.sources import Source
from tests.conftest import People
from tests.oauth.sources import SOURCE

from .hostile import answer, deep, hostile_provider, streamed, trickle


def at(url: str) -> Source:
    return replace(SOURCE, token_url=f"{url}/o/token/", revoke_url=f"{url}/o/revoke/")


def exchange(source: Source) -> dict:
    return client.exchange_code(source, code="c", verifier="v" * 43, redirect_uri="http://127.0.0.1/cb")


@pytest.fixture
def short_deadline(settings):
    settings.HARBOR_OAUTH_CALL_SECONDS = 1
    return settings


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "status-line-and-headers"])
def test_a_trickled_answer_ends_at_the_total_deadline_for_every_call(short_deadline, headers_too: bool) -> None:
    with hostile_provider(trickle(0.05, headers_too=headers_too)) as url:
        source = at(url)
        for call in (lambda: exchange(source), lambda: client.refresh(source, "rt")):
            started = time.monotonic()
            with pytest.raises(client.ProviderDown, match="within 1 seconds"):
                call()
            assert time.monotonic() - started < 2.5
        started = time.monotonic()
        client.revoke(source, "at")  # best effort, and as bounded
        assert time.monotonic() - started < 2.5


@pytest.mark.parametrize(
    "behaviour",
    [streamed(b"a" * 65536, 40 * 1024 * 1024), answer(b'{"access_token": "' + b"a" * 40 * 1024 * 1024 + b'"}')],
    ids=["undeclared-length", "declared-length"],
)
def test_an_answer_over_the_size_cap_is_refused_before_it_is_read_whole(settings, behaviour) -> None:
    with hostile_provider(behaviour) as url:
        started = time.monotonic()
        with pytest.raises(client.ProviderUnusable, match="larger than 64 KB"):
            exchange(at(url))
        assert time.monotonic() - started < 5


def test_a_deeply_nested_answer_is_unusable_not_a_crash(settings) -> None:
    with hostile_provider(answer(deep(100_000))) as url:
        with pytest.raises(client.ProviderUnusable, match="larger than"):
            exchange(at(url))  # 200 KB: over the cap before it is parsed
    settings.HARBOR_OAUTH_MAX_RESPONSE_BYTES = 1024 * 1024
    for levels in (30_000, 100_000):
        with hostile_provider(answer(deep(levels))) as url:
            with pytest.raises(client.ProviderUnusable, match="nested too deeply"):
                exchange(at(url))


@pytest.mark.parametrize(
    "body, says",
    [
        (b'{"access_token": "at", "expires_in": 1e400}', "expires_in is not a finite number"),
        (b'{"access_token": "at", "expires_in": 1000000000000000000000000000000}', "expiry is out of range"),
        (b'{"access_token": "at", "expires_at": 1e30}', "expiry is out of range"),
        (b'{"access_token": "at", "expires_in": "soon"}', "expires_in is not a number"),
        (b'{"access_token": "at", "expires_in": -5}', "expiry is out of range"),
        (b'{"access_token": ["at"]}', "access_token is not a string"),
        (b'["at"]', "not a JSON object"),
        (b'{"access_token": "' + b"a" * 20_000 + b'"}', "access_token is longer than 16384 characters"),
        (b'{"access_token": "at", "refresh_token": "' + b"r" * 20_000 + b'"}', "refresh_token is longer than"),
        (b'{"access_token": "at", "scope": "' + b"s" * 3_000 + b'"}', "scope is longer than 500 characters"),
    ],
    ids=[
        "expires-in-1e400",
        "expires-in-10e30",
        "expires-at-1e30",
        "expires-in-text",
        "expires-in-negative",
        "token-not-text",
        "not-an-object",
        "long-access-token",
        "long-refresh-token",
        "long-scope",
    ],
)
def test_a_token_answer_harbor_cannot_keep_is_unusable(settings, body: bytes, says: str) -> None:
    with hostile_provider(answer(body)) as url:
        with pytest.raises(client.ProviderUnusable, match=says):
            exchange(at(url))


def test_a_100000_character_scope_is_refused_even_under_a_larger_cap(settings) -> None:
    settings.HARBOR_OAUTH_MAX_RESPONSE_BYTES = 1024 * 1024
    with hostile_provider(answer(b'{"access_token": "at", "scope": "' + b"s " * 50_000 + b'"}')) as url:
        with pytest.raises(client.ProviderUnusable, match="scope is longer than"):
            exchange(at(url))


def test_a_provider_error_is_quoted_briefly(settings) -> None:
    body = b'{"error": "invalid_grant", "error_description": "' + b"x" * 5_000 + b'"}'
    with hostile_provider(answer(body, status=400)) as url:
        with pytest.raises(client.ProviderRefused) as refused:
            exchange(at(url))
    assert str(refused.value).startswith("invalid_grant: xxx") and len(str(refused.value)) <= 200


def test_a_good_answer_is_kept_as_checked_tokens(settings) -> None:
    body = b'{"access_token": "at", "refresh_token": "rt", "token_type": "Bearer", "expires_in": 3600, "scope": "a b"}'
    with hostile_provider(answer(body)) as url:
        token = exchange(at(url))
    assert {k: token[k] for k in ("access_token", "refresh_token", "token_type", "scope")} == {
        "access_token": "at",
        "refresh_token": "rt",
        "token_type": "Bearer",
        "scope": "a b",
    }
    assert 3590 < token["expires_at"] - time.time() <= 3600


def test_provider_calls_in_flight_are_bounded_per_provider_and_in_all(short_deadline) -> None:
    settings = short_deadline
    settings.HARBOR_OAUTH_CALLS_PER_PROVIDER, settings.HARBOR_OAUTH_CALLS_AT_ONCE = 2, 3
    good = answer(b'{"access_token": "at"}')
    with hostile_provider(trickle(0.05)) as slow, hostile_provider(trickle(0.05)) as other_slow:
        with hostile_provider(good) as fast:
            held = [threading.Thread(target=_fails_slowly, args=(at(slow),)) for _ in range(2)]
            for thread in held:
                thread.start()
            time.sleep(0.3)  # both slow calls hold their slots
            started = time.monotonic()
            with pytest.raises(client.ProviderSwamped, match="with this provider"):
                exchange(at(slow))
            assert time.monotonic() - started < 0.5  # refused at once, not queued
            assert exchange(at(fast))["access_token"] == "at"  # another provider still has room
            third = threading.Thread(target=_fails_slowly, args=(at(other_slow),))
            third.start()
            time.sleep(0.3)
            with pytest.raises(client.ProviderSwamped, match="too many sign-ins are in progress"):
                exchange(at(fast))  # every slot of the process is taken
            for thread in (*held, third):
                thread.join()
            assert exchange(at(fast))["access_token"] == "at"  # and given back


def _fails_slowly(source: Source) -> None:
    with pytest.raises(client.ProviderDown):
        exchange(source)


def test_an_unusable_refresh_answer_keeps_the_credential(people: People, settings) -> None:
    """A provider that answers a refresh with garbage is down, not a refusal: the person's
    credential stays, to be refreshed once the provider mends."""
    alice = people.acme.memberships.get(user__username="alice").user
    with hostile_provider(answer(b'{"access_token": "at", "expires_in": 1e400}')) as url:
        source = at(url)
        stored = {"access_token": "old", "refresh_token": "rt", "token_type": "Bearer", "scope": ""}
        credential_store(tenant=people.acme, user=alice, source=source, token={**stored, "expires_at": 0.0})
        with pytest.raises(client.ProviderDown, match="expires_in"):
            access_token(tenant=people.acme, user=alice, source=source)
    kept = OAuthCredential.objects.get(user=alice)
    assert unseal(kept.sealed)["refresh_token"] == "rt"
