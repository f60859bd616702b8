"""Every row of PROTOCOL §6's error table, against the live provider: each answer is a page
a person can read and a code a program can branch on (JSON when asked), and each leaves the
pause as the table says."""

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from tests.live import free_port
from tests.oauth_live import ProviderBrowser, form_fields

from .helpers import (
    BROWSER_ACCEPT,
    begin,
    in_server,
    open_pause,
    pause_states,
    run_state,
    signed_in,
    start_calendar_run,
    wait_status,
)
from .test_live_signin import forget_credentials

JSON = {"Accept": "application/json"}
CALLBACK = "/v1/tools/oauth/callback"


def parked(harbor, person: str = "alice") -> tuple[httpx.Client, str, dict]:
    client = signed_in(harbor, person)
    forget_credentials(harbor, person)
    run_id = start_calendar_run(client)
    wait_status(harbor, run_id, "paused")
    return client, run_id, open_pause(harbor, run_id)["payload"]


def expect(client: httpx.Client, url: str, status: int, code: str) -> None:
    """The same answer twice: as a page (with the code shown), and as JSON."""
    page = client.get(url)
    assert page.status_code == status and "text/html" in page.headers["content-type"]
    assert f"<code>{code}</code>" in page.text
    data = client.get(url, headers=JSON)
    assert data.status_code == status and data.json()["code"] == code and data.json()["message"]


def test_a_callback_without_state_or_code_is_invalid_request(oauth_harbor) -> None:
    alice = signed_in(oauth_harbor, "alice")
    expect(alice, CALLBACK, 400, "invalid_request")
    expect(alice, f"{CALLBACK}?code=abc", 400, "invalid_request")
    expect(alice, f"{CALLBACK}?state=hrbs_abc", 400, "invalid_request")


def test_an_unknown_state_is_flow_not_found(oauth_harbor) -> None:
    alice = signed_in(oauth_harbor, "alice")
    expect(alice, f"{CALLBACK}?state=hrbs_{'x' * 43}&code=abc", 404, "flow_not_found")
    expect(alice, f"{CALLBACK}?state=not-even-ours&code=abc", 404, "flow_not_found")


def test_another_person_cannot_complete_the_sign_in_state_mismatch(oauth_harbor, live_provider) -> None:
    forget_credentials(oauth_harbor, "bob")  # whatever another test left: none may appear here
    alice, run_id, payload = parked(oauth_harbor)
    bob = signed_in(oauth_harbor, "bob")
    gina = signed_in(oauth_harbor, "gina")  # another tenant
    for other in (bob, gina):  # nobody else can begin her sign-in
        expect(other, payload["AuthorizeURL"].removeprefix(oauth_harbor.url), 400, "state_mismatch")
    # A code for her state from someone else's account at the provider (her provider address
    # leaked), presented by anyone but the browser that began it: bob, gina, her other login.
    provider_url = begin(alice, payload["AuthorizeURL"])
    callback = ProviderBrowser(live_provider, "bob").consent(provider_url)  # bob's own provider login
    path = callback.removeprefix(oauth_harbor.url)
    for other in (bob, gina, signed_in(oauth_harbor, "alice")):
        page = other.get(path, headers=JSON)
        assert page.status_code == 400 and page.json()["code"] == "state_mismatch"
    assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    count = in_server(
        oauth_harbor, "print(OAuthCredential.objects.filter(user__username__in=['alice', 'bob']).count())"
    )
    assert count == 0
    # Alice herself, in the browser that began it, still can.
    fresh = ProviderBrowser(live_provider, "alice").consent(provider_url)
    assert alice.get(fresh.removeprefix(oauth_harbor.url)).status_code == 200
    assert "Stand-up" in wait_status(oauth_harbor, run_id, "complete")["answer"]


def test_a_denied_consent_is_authorization_denied_and_rejects_the_pause(oauth_harbor, live_provider) -> None:
    alice, run_id, payload = parked(oauth_harbor)
    callback = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]), allow=False)
    assert "error=access_denied" in callback
    page = alice.get(callback)
    assert page.status_code == 400 and "<code>authorization_denied</code>" in page.text
    assert pause_states(oauth_harbor, run_id) == [["resumed", "reject"]]
    state = run_state(oauth_harbor, run_id)
    assert state["status"] == "failed" and "denied" in state["failure"]
    # The flow is spent: the same answer again finds nothing.
    assert alice.get(callback, headers=JSON).json()["code"] == "flow_not_found"


def test_an_expired_flow_is_flow_expired_the_pause_stays_open_and_she_can_start_again(
    oauth_harbor, live_provider
) -> None:
    alice, run_id, payload = parked(oauth_harbor)
    provider_url = begin(alice, payload["AuthorizeURL"])
    in_server(
        oauth_harbor,
        "from datetime import timedelta\nfrom django.utils import timezone\n"
        f"OAuthFlow.objects.filter(run_id={run_id!r}).update("
        "expires_at=timezone.now() - timedelta(seconds=1)); print(1)",
    )
    expect(alice, payload["AuthorizeURL"].removeprefix(oauth_harbor.url), 410, "flow_expired")  # too late to begin
    callback = ProviderBrowser(live_provider, "alice").consent(provider_url)
    expect(alice, callback.removeprefix(oauth_harbor.url), 410, "flow_expired")
    assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    assert run_state(oauth_harbor, run_id)["status"] == "paused"

    # The expired page offers a new sign-in for the same pause.
    expired = alice.get(callback)
    form = re.search(r'<form method="post" action="([^"]+)"', expired.text)
    assert form, "the expired page offers no new sign-in"
    action = form.group(1)
    ready = alice.post(action, data=form_fields(expired.text))
    link = re.search(r'href="([^"]+)" data-oauth-signin', ready.text)
    assert ready.status_code == 200 and link
    fresh_url = link.group(1).replace("&amp;", "&")
    assert httpx.URL(fresh_url).params["state"] != payload["State"]
    fresh = ProviderBrowser(live_provider, "alice").consent(begin(alice, fresh_url))
    assert alice.get(fresh).status_code == 200
    assert "Stand-up" in wait_status(oauth_harbor, run_id, "complete")["answer"]
    # The first state was retired by the second sign-in.
    assert alice.get(callback, headers=JSON).json()["code"] == "flow_not_found"
    # Nobody else can start a sign-in for her pause.
    bob = signed_in(oauth_harbor, "bob")
    page = bob.get("/inbox/")
    refused = bob.post(action, data=form_fields(page.text))
    assert refused.status_code == 302 and "data-oauth-signin" not in refused.text


def _set_source(harbor, **changes: str) -> None:
    sets = ", ".join(f"{name}={value!r}" for name, value in changes.items())
    in_server(
        harbor,
        "from approvals.oauth.models import OAuthSource\nfrom approvals.oauth.sealing import seal\n"
        f"OAuthSource.objects.filter(name='calendar').update({sets}); print(1)",
    )


def _restore_source(harbor, provider) -> None:
    harbor.manage(
        "harbor_oauth_demo", "--provider-url", provider.url, "--client-secret-file", str(provider.secret_file)
    )


def test_a_refused_exchange_is_exchange_failed_and_she_can_try_again(oauth_harbor, live_provider) -> None:
    alice, run_id, payload = parked(oauth_harbor)
    in_server(
        oauth_harbor,
        "from approvals.oauth.models import OAuthSource\nfrom approvals.oauth.sealing import seal\n"
        "OAuthSource.objects.filter(name='calendar').update("
        "client_secret_sealed=seal('not-the-secret')); print(1)",
    )
    try:
        callback = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]))
        page = alice.get(callback)
        assert page.status_code == 502 and "<code>exchange_failed</code>" in page.text
        assert "invalid_client" in page.text and "try signing in again" in page.text
        assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    finally:
        _restore_source(oauth_harbor, live_provider)
    # The same sign-in link works again once the source is right.
    retry = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]))
    assert alice.get(retry).status_code == 200
    wait_status(oauth_harbor, run_id, "complete")


def test_a_provider_that_is_down_answers_a_clear_page_not_a_500(oauth_harbor, live_provider) -> None:
    alice, run_id, payload = parked(oauth_harbor)
    provider_url = begin(alice, payload["AuthorizeURL"])
    # A provider error that is not her refusal leaves the pause open.
    taken = httpx.URL(provider_url).params["state"]  # the flow's state and her browser's nonce
    expect(alice, f"{CALLBACK}?state={taken}&error=server_error", 502, "exchange_failed")
    assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    callback = ProviderBrowser(live_provider, "alice").consent(provider_url)
    _set_source(oauth_harbor, token_url=f"http://127.0.0.1:{free_port()}/o/token/")  # nothing listens there
    try:
        page = alice.get(callback)
        assert page.status_code == 502 and "is not answering" in page.text
        assert "<code>exchange_failed</code>" in page.text
        assert alice.get(callback, headers=JSON).json()["code"] == "exchange_failed"
        assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    finally:
        _restore_source(oauth_harbor, live_provider)


def test_a_signed_out_browser_is_asked_to_sign_in_first(oauth_harbor, live_provider) -> None:
    """Her own sign-in's callback, in a browser signed out of Harbor meanwhile; a state no
    flow has is unknown to anyone, signed in or not (PROTOCOL §6)."""
    alice, run_id, payload = parked(oauth_harbor)
    callback = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]))
    anonymous = httpx.Client(base_url=oauth_harbor.url, headers={"Accept": BROWSER_ACCEPT})
    page = anonymous.get(callback.removeprefix(oauth_harbor.url))
    assert page.status_code == 401 and "Sign in to Harbor" in page.text and "/login/?next=" in page.text
    assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    unknown = anonymous.get(f"{CALLBACK}?state=hrbs_{'y' * 43}&code=abc", headers=JSON)
    assert unknown.status_code == 404 and unknown.json()["code"] == "flow_not_found"
    # Beginning a sign-in signed out: the Harbor login first, then back to it.
    begin_path = payload["AuthorizeURL"].removeprefix(oauth_harbor.url)
    to_login = anonymous.get(begin_path, follow_redirects=False)
    assert to_login.status_code == 302 and to_login.headers["location"].startswith("/login/?next=")
    assert anonymous.get(f"/accounts/sign-in/begin/?state=hrbs_{'y' * 43}").status_code == 404


def test_a_callback_replayed_at_the_same_moment_completes_once_the_rest_are_flow_not_found(
    oauth_harbor, live_provider
) -> None:
    """The provider takes a code once: of the same callback sent at once, one completes the
    sign-in and the rest find it used (PROTOCOL §6: a replayed callback is 404), not a
    refused exchange that tells her the run still waits."""
    alice, run_id, payload = parked(oauth_harbor)
    callback = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: alice.get(callback, headers=JSON), range(8)))
    assert sorted(answer.status_code for answer in answers) == [200] + [404] * 7
    assert {answer.json().get("code") for answer in answers if answer.status_code == 404} == {"flow_not_found"}
    assert pause_states(oauth_harbor, run_id) == [["resumed", "resume"]]
    wait_status(oauth_harbor, run_id, "complete")


def test_knowing_her_state_forges_no_denial_and_a_late_one_is_flow_expired(oauth_harbor, live_provider) -> None:
    """Whoever the pause's token reaches sees its State (an admin may); her browser began the
    sign-in. A denial sent to her browser with that State alone is refused (the provider was
    given the State with a nonce only her session holds), and once the flow expired even
    her own denial is 410, not the end of her run."""
    alice, run_id, payload = parked(oauth_harbor)
    provider_url = begin(alice, payload["AuthorizeURL"])
    expect(alice, f"{CALLBACK}?state={payload['State']}&error=access_denied", 400, "state_mismatch")
    assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    in_server(
        oauth_harbor,
        "from datetime import timedelta\nfrom django.utils import timezone\n"
        f"OAuthFlow.objects.filter(run_id={run_id!r}).update("
        "expires_at=timezone.now() - timedelta(seconds=1)); print(1)",
    )
    taken = httpx.URL(provider_url).params["state"]
    expect(alice, f"{CALLBACK}?state={taken}&error=access_denied", 410, "flow_expired")
    assert pause_states(oauth_harbor, run_id) == [["paused", ""]]


def test_a_cancelled_runs_sign_in_cannot_begin_or_complete(oauth_harbor, live_provider) -> None:
    alice, run_id, payload = parked(oauth_harbor)
    provider_url = begin(alice, payload["AuthorizeURL"])
    form = form_fields(alice.get(f"/console/runs/{run_id}/").text)
    assert alice.post(f"/console/runs/{run_id}/steer/cancel/", data=form).status_code == 302
    assert run_state(oauth_harbor, run_id)["status"] == "cancelled"
    expect(alice, payload["AuthorizeURL"].removeprefix(oauth_harbor.url), 404, "flow_not_found")
    callback = ProviderBrowser(live_provider, "alice").consent(provider_url)
    expect(alice, callback.removeprefix(oauth_harbor.url), 404, "flow_not_found")  # no code traded for nothing


def _callback_through(token_endpoint: type[BaseHTTPRequestHandler], harbor, provider, client, callback: str):
    """The callback's answer (JSON), with the source's token endpoint served by `token_endpoint`."""
    relay = ThreadingHTTPServer(("127.0.0.1", 0), token_endpoint)
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    _set_source(harbor, token_url=f"http://127.0.0.1:{relay.server_address[1]}/o/token/")
    try:
        return client.get(callback, headers=JSON)
    finally:
        relay.shutdown()
        _restore_source(harbor, provider)


def test_tokens_traded_for_a_run_cancelled_meanwhile_are_revoked(oauth_harbor, live_provider) -> None:
    """The cancel lands while the code is traded (the token endpoint is reached through a
    relay that cancels the run first): nothing keeps the tokens, so the provider is asked to
    forget them, and the calendar refuses them."""
    alice, run_id, payload = parked(oauth_harbor)
    callback = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]))
    issued: list[dict] = []

    class CancelThenRelay(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            operator = signed_in(oauth_harbor, "alice")
            form = form_fields(operator.get(f"/console/runs/{run_id}/").text)
            assert operator.post(f"/console/runs/{run_id}/steer/cancel/", data=form).status_code == 302
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {name: self.headers[name] for name in ("Authorization", "Content-Type") if name in self.headers}
            answer = httpx.post(f"{live_provider.url}/o/token/", content=body, headers=headers)
            issued.append(answer.json())
            self.send_response(answer.status_code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, *args: object) -> None:
            pass

    answer = _callback_through(CancelThenRelay, oauth_harbor, live_provider, alice, callback)
    assert answer.status_code == 404 and answer.json()["code"] == "flow_not_found"
    assert run_state(oauth_harbor, run_id)["status"] == "cancelled"
    assert in_server(oauth_harbor, "print(OAuthCredential.objects.filter(user__username='alice').count())") == 0
    [token] = issued
    calendar = httpx.get(
        f"{live_provider.url}/api/calendar/events", headers={"Authorization": f"Bearer {token['access_token']}"}
    )
    assert calendar.status_code == 401  # revoked at the provider


def test_a_token_answer_without_an_access_token_is_exchange_failed_and_she_can_try_again(
    oauth_harbor, live_provider
) -> None:
    alice, run_id, payload = parked(oauth_harbor)
    callback = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]))

    class Tokenless(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"token_type": "Bearer", "expires_in": 3600}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    answer = _callback_through(Tokenless, oauth_harbor, live_provider, alice, callback)
    assert (answer.status_code, answer.json()["code"]) == (502, "exchange_failed")
    assert pause_states(oauth_harbor, run_id) == [["paused", ""]]
    retry = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]))
    assert alice.get(retry).status_code == 200
    wait_status(oauth_harbor, run_id, "complete")


def test_a_claim_left_by_a_callback_that_died_mid_exchange_lapses(oauth_harbor, live_provider) -> None:
    """A process that dies while it trades the code leaves its flow claimed: while the claim
    is young a callback finds it taken; once it has outlived any exchange, the sign-in goes on."""
    alice, run_id, payload = parked(oauth_harbor)
    callback = ProviderBrowser(live_provider, "alice").consent(begin(alice, payload["AuthorizeURL"]))

    def claimed(seconds_ago: int) -> None:
        in_server(
            oauth_harbor,
            "from datetime import timedelta\nfrom django.utils import timezone\n"
            "from approvals.oauth.models import OAuthFlow\n"
            f"OAuthFlow.objects.filter(run_id='{run_id}').update(outcome='exchanging', "
            f"used_at=timezone.now() - timedelta(seconds={seconds_ago})); print(1)",
        )

    claimed(5)
    expect(alice, callback.removeprefix(oauth_harbor.url), 404, "flow_not_found")
    claimed(61)
    assert alice.get(callback).status_code == 200
    wait_status(oauth_harbor, run_id, "complete")
