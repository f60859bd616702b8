"""The whole tool_oauth leg against the live demo provider (no mocks): a run parks, the
person signs in at the provider's pages, the callback exchanges the code, the same tool
call proceeds with her token and the run completes; the credential is reused, refreshed
when expired, and a revoked one pauses again."""

import re

import httpx

from tests.oauth_live import ProviderBrowser, form_fields

from .helpers import begin, in_server, open_pause, pause_states, run_events, signed_in, start_calendar_run, wait_status


def forget_credentials(harbor, person: str) -> None:
    in_server(harbor, f"OAuthCredential.objects.filter(user__username={person!r}).delete(); print(1)")


def sign_in_through_provider(harbor, provider, person: str, client: httpx.Client) -> tuple[str, httpx.Response]:
    """Start a calendar run, let it park, and complete the sign-in; the run id and the
    callback's page."""
    forget_credentials(harbor, person)
    run_id = start_calendar_run(client)
    wait_status(harbor, run_id, "paused")
    pause = open_pause(harbor, run_id)
    callback = ProviderBrowser(provider, person).consent(begin(client, pause["payload"]["AuthorizeURL"]))
    return run_id, client.get(callback)


def test_a_run_parks_alice_signs_in_and_the_same_call_completes_with_her_calendar(oauth_harbor, live_provider) -> None:
    alice = signed_in(oauth_harbor, "alice")
    forget_credentials(oauth_harbor, "alice")
    run_id = start_calendar_run(alice)
    wait_status(oauth_harbor, run_id, "paused")

    pause = open_pause(oauth_harbor, run_id)
    assert (pause["cause"], pause["reason"]) == ("tool_oauth", "external_event")
    parked = run_events(oauth_harbor, run_id)
    types = [e["type"] for e in parked]
    assert types[-3:] == ["pause.requested", "tool.auth_required", "notification.pause_requested"]
    required = parked[-2]["payload"]
    assert set(required) == {"SourceName", "AuthorizeURL", "State", "PauseToken", "Scopes"}
    assert required["SourceName"] == "Demo Calendar" and required["Scopes"] == ["calendar.read"]
    assert required["PauseToken"] == parked[-3]["payload"]["Token"] and required["PauseToken"].startswith("hrbp_")
    assert required["AuthorizeURL"].startswith(f"{oauth_harbor.url}/accounts/sign-in/begin/?state=")
    url = httpx.URL(begin(alice, required["AuthorizeURL"]))  # her browser begins it, Harbor sends it on
    assert str(url).startswith(f"{live_provider.url}/o/authorize/")
    # The provider is given the flow's state with a nonce only this browser's session holds.
    assert url.params["state"].startswith(required["State"] + ".") and url.params["code_challenge_method"] == "S256"
    assert len(required["State"]) >= 43  # 256 bits, URL-safe

    inbox = alice.get("/inbox/").text
    assert "Sign in to Demo Calendar" in inbox and "/accounts/sign-in/begin/?state=" in inbox
    run_page = alice.get(f"/console/runs/{run_id}/").text
    link = re.search(
        r'<a class="button primary" href="([^"]+)"[^>]*data-oauth-signin>Sign in to Demo Calendar</a>', run_page
    )
    assert link and link.group(1).replace("&amp;", "&") == required["AuthorizeURL"]

    callback = ProviderBrowser(live_provider, "alice").consent(str(url))
    assert callback.startswith(f"{oauth_harbor.url}/v1/tools/oauth/callback?")
    page = alice.get(callback)
    assert page.status_code == 200 and "Authorization complete" in page.text

    done = wait_status(oauth_harbor, run_id, "complete")
    assert "Stand-up" in done["answer"] and "Lunch with Bob" in done["answer"]
    narrated = run_events(oauth_harbor, run_id)
    after = [e["type"] for e in narrated][len(parked) :]
    assert after[:2] == ["tool.auth_completed", "pause.resumed"]
    assert narrated[len(parked)]["payload"] == {"SourceName": "Demo Calendar", "PauseToken": required["PauseToken"]}
    assert narrated[len(parked) + 1]["payload"]["Decision"] == "resume"
    assert after[-1] == "task.completed"
    # The tool call that parked is the one that proceeded (same step, a second attempt).
    invoked = [e["payload"] for e in narrated if e["type"] == "tool.invoked"]
    assert [(i["Step"], i["Attempt"]) for i in invoked] == [(0, 1), (0, 2)]
    assert pause_states(oauth_harbor, run_id) == [["resumed", "resume"]]

    # A replayed callback finds nothing to do.
    again = alice.get(callback, headers={"Accept": "application/json"})
    assert again.status_code == 404 and again.json()["code"] == "flow_not_found"


def test_the_stored_credential_is_used_next_time_without_a_pause(oauth_harbor, live_provider) -> None:
    bob = signed_in(oauth_harbor, "bob")
    run_id, page = sign_in_through_provider(oauth_harbor, live_provider, "bob", bob)
    assert page.status_code == 200
    wait_status(oauth_harbor, run_id, "complete")

    second = start_calendar_run(bob)
    done = wait_status(oauth_harbor, second, "complete")
    assert done["pauses"] == 0 and "Approvals triage" in done["answer"]


def test_an_expired_access_token_is_refreshed_without_a_pause(oauth_harbor, live_provider) -> None:
    alice = signed_in(oauth_harbor, "alice")
    run_id, _ = sign_in_through_provider(oauth_harbor, live_provider, "alice", alice)
    wait_status(oauth_harbor, run_id, "complete")
    before = in_server(
        oauth_harbor,
        "from approvals.oauth.sealing import unseal\n"
        "c = OAuthCredential.objects.get(user__username='alice')\n"
        "print(json.dumps(unseal(c.sealed)))",
    )
    # The access token expires, at the provider and in Harbor's record of it.
    live_provider.sql(
        "UPDATE oauth2_provider_accesstoken SET expires = '2000-01-01 00:00:00' WHERE token = ?",
        (before["access_token"],),
    )
    in_server(
        oauth_harbor,
        "from approvals.oauth.sealing import seal, unseal\n"
        "c = OAuthCredential.objects.get(user__username='alice')\n"
        "t = unseal(c.sealed); t['expires_at'] = 946684800; c.sealed = seal(t); c.save(); print(1)",
    )
    expired = httpx.get(
        f"{live_provider.url}/api/calendar/events", headers={"Authorization": f"Bearer {before['access_token']}"}
    )
    assert expired.status_code == 401

    second = start_calendar_run(alice)
    done = wait_status(oauth_harbor, second, "complete")
    assert done["pauses"] == 0 and "Stand-up" in done["answer"]
    after = in_server(
        oauth_harbor,
        "from approvals.oauth.sealing import unseal\n"
        "c = OAuthCredential.objects.get(user__username='alice')\n"
        "print(json.dumps({**unseal(c.sealed), 'refreshed': bool(c.refreshed_at)}))",
    )
    assert after["refreshed"] and after["access_token"] != before["access_token"]
    assert after["refresh_token"] != before["refresh_token"]  # the provider rotates refresh tokens


def test_a_revoked_credential_makes_the_next_call_pause_again(oauth_harbor, live_provider) -> None:
    gina = signed_in(oauth_harbor, "gina")
    run_id, _ = sign_in_through_provider(oauth_harbor, live_provider, "gina", gina)
    wait_status(oauth_harbor, run_id, "complete")
    token = in_server(
        oauth_harbor,
        "from approvals.oauth.sealing import unseal\n"
        "print(json.dumps(unseal(OAuthCredential.objects.get(user__username='gina')"
        ".sealed)['access_token']))",
    )

    accounts = gina.get("/accounts/connected/")
    assert accounts.status_code == 200 and "Demo Calendar" in accounts.text
    answer = gina.post("/accounts/connected/calendar/disconnect/", data=form_fields(accounts.text))
    assert answer.status_code == 302
    assert "No connected accounts" in gina.get("/accounts/connected/").text
    # Revoked at the provider too: the old token no longer reads the calendar.
    api = httpx.get(f"{live_provider.url}/api/calendar/events", headers={"Authorization": f"Bearer {token}"})
    assert api.status_code == 401

    second = start_calendar_run(gina)
    wait_status(oauth_harbor, second, "paused")
    assert open_pause(oauth_harbor, second)["cause"] == "tool_oauth"


def test_the_credential_table_holds_nothing_usable_without_its_key(oauth_harbor, live_provider) -> None:
    alice = signed_in(oauth_harbor, "alice")
    run_id, _ = sign_in_through_provider(oauth_harbor, live_provider, "alice", alice)
    wait_status(oauth_harbor, run_id, "complete")
    issued = {
        row[0]
        for row in live_provider.sql(
            "SELECT t.token FROM oauth2_provider_accesstoken t JOIN auth_user u ON u.id = t.user_id "
            "WHERE u.username = 'alice'"
        )
    }
    issued |= {
        row[0]
        for row in live_provider.sql(
            "SELECT t.token FROM oauth2_provider_refreshtoken t JOIN auth_user u ON u.id = t.user_id "
            "WHERE u.username = 'alice'"
        )
    }
    rows = in_server(
        oauth_harbor,
        "from django.db import connection\n"
        "c = connection.cursor()\n"
        "c.execute('SELECT * FROM approvals_oauthcredential')\n"
        "a = [str(v) for r in c.fetchall() for v in r]\n"
        "c.execute('SELECT * FROM approvals_oauthflow')\n"
        "b = [str(v) for r in c.fetchall() for v in r]\n"
        "c.execute('SELECT * FROM approvals_oauthsource')\n"
        "s = [str(v) for r in c.fetchall() for v in r]\n"
        "print(json.dumps(a + b + s))",
    )
    dump = " ".join(rows)
    assert issued and not any(token in dump for token in issued)
    assert live_provider.secret_file.read_text().strip() not in dump  # the client secret is sealed too
    # Under another key list the sealed credential is unusable, and is dropped rather than sent.
    other = in_server(
        oauth_harbor,
        "from approvals.oauth.sealing import Unsealable, unseal\n"
        "c = OAuthCredential.objects.get(user__username='alice')\n"
        "try:\n    unseal(c.sealed); print('1')\n"
        "except Unsealable:\n    print('0')",
        env={"HARBOR_CREDENTIAL_KEYS": "some-other-key-0123456789abcdef"},
    )
    assert other == 0
