"""The live Harbor against hostile OAuth providers (real servers on loopback, tests/oauth/
hostile.py): a token endpoint that trickles cannot take the site down, no token answer makes
the callback answer 500 or leaves a flow claimed, a HEAD changes nothing, and "sign in
again" without its source is a clear error."""

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest

from tests.oauth_live import ProviderBrowser, form_fields

from .helpers import begin, in_server, open_pause, pause_states, signed_in, start_calendar_run, wait_status
from .hostile import Behaviour, answer, deep, hostile_provider, streamed, trickle
from .test_live_callback_errors import CALLBACK, JSON, _restore_source, _set_source, parked

CALL_SECONDS = 10  # HARBOR_OAUTH_CALL_SECONDS, the default the live server runs with


@contextmanager
def token_endpoint(harbor, provider, behaviour: Behaviour) -> Iterator[None]:
    """The `calendar` source's token endpoint served by a hostile provider meanwhile."""
    with hostile_provider(behaviour) as url:
        _set_source(harbor, token_url=f"{url}/o/token/")
        try:
            yield
        finally:
            _restore_source(harbor, provider)


def flows_of(harbor, run_id: str) -> list[str]:
    return in_server(harbor, f"print(json.dumps([f.outcome for f in OAuthFlow.objects.filter(run_id={run_id!r})]))")


def credentials_of(harbor, person: str) -> int:
    return in_server(harbor, f"print(OAuthCredential.objects.filter(user__username={person!r}).count())")


def test_a_trickling_token_endpoint_does_not_take_the_site_down(oauth_harbor, live_provider) -> None:
    """21 sign-ins complete at once against a provider that trickles its token answer a byte
    at a time: the pages, /v1 and /healthz keep answering for everyone, each callback ends
    with exchange_failed within the provider-call deadline, and every sign-in can be made again."""
    person = "bob"
    browsers = [signed_in(harbor=oauth_harbor, person=person) for _ in range(3)]  # 10 sign-ins a session
    in_server(oauth_harbor, f"OAuthCredential.objects.filter(user__username={person!r}).delete(); print(1)")
    runs = [start_calendar_run(browsers[0]) for _ in range(21)]
    callbacks = []
    for index, run_id in enumerate(runs):
        wait_status(oauth_harbor, run_id, "paused")
        browser = browsers[index % 3]
        taken = httpx.URL(begin(browser, open_pause(oauth_harbor, run_id)["payload"]["AuthorizeURL"])).params["state"]
        callbacks.append((browser, f"{CALLBACK}?state={taken}&code=some-code"))
    others = httpx.Client(base_url=oauth_harbor.url, timeout=3)
    try:
        with token_endpoint(oauth_harbor, live_provider, trickle(0.5)), ThreadPoolExecutor(21) as pool:
            started = time.monotonic()
            answers = [pool.submit(lambda c: c[0].get(c[1], headers=JSON, timeout=60), c) for c in callbacks]
            time.sleep(1)  # the callbacks are in, those let through wait on the provider
            while time.monotonic() - started < CALL_SECONDS - 2:
                for path in ("/healthz", "/login/", "/v1/pause/list"):
                    probe = time.monotonic()
                    status = others.get(path).status_code  # a timeout here is the site down
                    assert status < 500 and time.monotonic() - probe < 2, (path, status)
                assert browsers[0].get("/inbox/", timeout=3).status_code == 200
                time.sleep(0.5)
            done = [future.result() for future in answers]
            assert time.monotonic() - started < CALL_SECONDS + 8
        assert {(a.status_code, a.json()["code"]) for a in done} == {(502, "exchange_failed")}
        assert any("not answer within" in a.json()["message"] for a in done)
        assert any("try again in a moment" in a.json()["message"] for a in done)
        # No sign-in is left claimed; each run still waits for its sign-in.
        for run_id in runs[:3]:
            assert flows_of(oauth_harbor, run_id) == [""]
            assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    finally:
        for run_id in runs:
            form = form_fields(browsers[0].get(f"/console/runs/{run_id}/").text)
            browsers[0].post(f"/console/runs/{run_id}/steer/cancel/", data=form)


HOSTILE_ANSWERS = {
    "expires-in-1e400": answer(b'{"access_token": "at", "token_type": "Bearer", "expires_in": 1e400}'),
    "expires-in-10e30": answer(b'{"access_token": "at", "token_type": "Bearer", "expires_in": 1' + b"0" * 30 + b"}"),
    "100000-deep": answer(deep(100_000)),
    "40-MB-access-token": streamed(b"a" * 65536, 40 * 1024 * 1024),
    "100000-character-scope": answer(b'{"access_token": "at", "scope": "' + b"s" * 100_000 + b'"}'),
    "20-KB-access-token": answer(b'{"access_token": "' + b"a" * 20_000 + b'"}'),
    "3000-character-scope": answer(b'{"access_token": "at", "scope": "' + b"s" * 3_000 + b'"}'),
    "html-error-page": answer(b"<html>Bad gateway</html>", status=200),
}


def test_no_token_answer_makes_the_callback_fail_or_leaves_the_flow_claimed(oauth_harbor, live_provider) -> None:
    """Each hostile answer is exchange_failed (never 500), stores nothing, and gives the flow
    back: the same sign-in then completes against the real provider."""
    alice, run_id, payload = parked(oauth_harbor)
    callback = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]))
    for name, behaviour in HOSTILE_ANSWERS.items():
        with token_endpoint(oauth_harbor, live_provider, behaviour):
            page = alice.get(callback, headers=JSON)
        assert (page.status_code, page.json()["code"]) == (502, "exchange_failed"), (name, page.text[:300])
        left = in_server(
            oauth_harbor,
            f"print(json.dumps([[f.outcome for f in OAuthFlow.objects.filter(run_id={run_id!r})], "
            f"[p.state for p in Pause.objects.filter(run_id={run_id!r})], "
            "OAuthCredential.objects.filter(user__username='alice').count()]))",
        )
        assert left == [[""], ["paused"], 0], name  # not claimed, still waiting, nothing kept
    # The provider's code has likely lapsed meanwhile (it lives a minute): she signs in anew.
    page = alice.get(ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"])))
    assert page.status_code == 200 and "Authorization complete" in page.text
    wait_status(oauth_harbor, run_id, "complete")


def test_a_head_on_the_callback_changes_nothing(oauth_harbor, live_provider) -> None:
    """A link checker or a prefetch HEADs the address: no code is traded, no denial taken."""
    alice, run_id, payload = parked(oauth_harbor)
    provider_url = begin(alice, payload["AuthorizeURL"])
    taken = httpx.URL(provider_url).params["state"]
    assert alice.head(f"{CALLBACK}?state={taken}&error=access_denied").status_code == 200
    callback = ProviderBrowser(live_provider, "alice").consent(provider_url)
    assert alice.head(callback).status_code == 200
    assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    assert flows_of(oauth_harbor, run_id) == [""] and credentials_of(oauth_harbor, "alice") == 0
    page = alice.get(callback)  # the GET that follows still completes it
    assert page.status_code == 200 and "Authorization complete" in page.text
    wait_status(oauth_harbor, run_id, "complete")


@pytest.mark.parametrize("accept", ["html", "json"])
def test_sign_in_again_after_its_source_was_removed_is_a_clear_error(oauth_harbor, live_provider, accept) -> None:
    alice, run_id, payload = parked(oauth_harbor)
    in_server(
        oauth_harbor,
        "from datetime import timedelta\nfrom django.utils import timezone\n"
        f"OAuthFlow.objects.filter(run_id={run_id!r}).update("
        "expires_at=timezone.now() - timedelta(seconds=1)); print(1)",
    )
    expired = alice.get(payload["AuthorizeURL"].removeprefix(oauth_harbor.url))
    assert expired.status_code == 410
    action = f"/accounts/sign-in/{open_pause(oauth_harbor, run_id)['id']}/"
    in_server(
        oauth_harbor,
        "from approvals.oauth.models import OAuthSource\nOAuthSource.objects.filter(name='calendar').delete(); print(1)",
    )
    try:
        headers = JSON if accept == "json" else {}
        answer_ = alice.post(action, data=form_fields(alice.get("/inbox/").text), headers=headers)
    finally:
        _restore_source(oauth_harbor, live_provider)
    assert answer_.status_code == 502
    if accept == "json":
        assert answer_.json()["code"] == "exchange_failed" and "calendar" in answer_.json()["message"]
    else:
        assert "<code>exchange_failed</code>" in answer_.text
    assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
