"""A sign-in a run started from the pages waits for is its owner's on every login
(PROTOCOL §4): alice signs out, signs in again and completes it; an admin, who may decide
the pause, and an approver, who may see the run, read whom it waits for, with no button."""

import re

from tests.oauth_live import ProviderBrowser

from .helpers import begin, in_server, open_pause, pause_states, signed_in, start_calendar_run, wait_status


def test_alice_completes_her_sign_in_after_signing_in_again_and_others_see_whom_it_waits_for(
    oauth_harbor, live_provider
) -> None:
    in_server(oauth_harbor, "OAuthCredential.objects.filter(user__username='alice').delete(); print(1)")
    first = signed_in(oauth_harbor, "alice")
    run_id = start_calendar_run(first)
    wait_status(oauth_harbor, run_id, "paused")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', first.get("/inbox/").text)
    assert token, "the page has the sign-out form"
    first.post("/logout/", data={"csrfmiddlewaretoken": token.group(1)})
    assert first.get("/inbox/", follow_redirects=False).status_code == 302  # that login is over

    again = signed_in(oauth_harbor, "alice")  # a new login session
    inbox = again.get("/inbox/").text
    assert "Sign in to Demo Calendar" in inbox and "Waiting for" not in inbox
    run_page = again.get(f"/console/runs/{run_id}/").text
    assert "data-oauth-signin" in run_page and "data-not-yours" not in run_page

    for person in ("admin", "bob"):  # an admin decides tool_oauth pauses by role; bob sees every run
        other = signed_in(oauth_harbor, person)
        seen = other.get(f"/console/runs/{run_id}/").text
        assert "Waiting for alice to sign in to Demo Calendar." in seen and "data-oauth-signin" not in seen
        cards = other.get("/inbox/").text
        assert "/accounts/sign-in/begin/" not in cards and "Sign in to Demo Calendar" not in cards
        if person == "admin":
            assert "Waiting for alice to sign in to Demo Calendar." in cards

    pause = open_pause(oauth_harbor, run_id)
    callback = ProviderBrowser(live_provider, "alice").consent(begin(again, pause["payload"]["AuthorizeURL"]))
    page = again.get(callback)
    assert page.status_code == 200 and "Authorization complete" in page.text
    wait_status(oauth_harbor, run_id, "complete")
    assert pause_states(oauth_harbor, run_id) == [["resumed", "resume"]]
