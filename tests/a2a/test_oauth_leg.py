"""A remote agent's auth-required that names an OAuth source this server knows is resolved
by the OAuth leg, against the live provider and a live travel desk (no mocks): the pause
carries the sign-in, Alice signs in at the provider, and the same remote task receives her
access token (the desk checks it against the provider's calendar API) and goes on."""

import re
from collections.abc import Iterator

import pytest

from tests.oauth.helpers import begin, in_server, open_pause, pause_states, run_events, signed_in, wait_status
from tests.oauth_live import ProviderBrowser, form_fields
from tests.travel_desk import Desk, start_desk, stop_desk


@pytest.fixture(scope="module")
def calendar_desk(oauth_harbor, live_provider) -> Iterator[Desk]:
    """A travel desk that checks calendar tokens with the live provider, known to acme."""
    desk = start_desk(env={"HARBOR_TRAVEL_DESK_CALENDAR_URL": live_provider.url})
    oauth_harbor.manage("a2a_remote_agent", "--tenant", "acme", "--name", "travel-desk", "--card-url", desk.url)
    yield desk
    stop_desk(desk)


def start_trip(client, query: str) -> str:
    page = client.get("/console/new/")
    answer = client.post(
        "/console/new/", data={**form_fields(page.text), "query": query, "agent_id": "trip", "priority": "0"}
    )
    assert answer.status_code == 302, answer.text[:300]
    found = re.search(r"/console/runs/(\w+)/", answer.headers["location"])
    assert found, answer.headers["location"]
    return found.group(1)


def decide(client, pause_id: str, **data: str) -> None:
    page = client.get("/inbox/")
    answer = client.post(f"/inbox/pauses/{pause_id}/decide/", data={**form_fields(page.text), **data})
    assert answer.status_code == 302, answer.text[:300]


def test_a_remote_sign_in_is_resolved_by_the_oauth_leg_and_the_same_task_gets_her_token(
    oauth_harbor, live_provider, calendar_desk
):
    alice = signed_in(oauth_harbor, "alice")
    run_id = start_trip(alice, "Book a flight to Lima, the desk needs my calendar")
    wait_status(oauth_harbor, run_id, "paused")

    pause = open_pause(oauth_harbor, run_id)
    assert (pause["cause"], pause["reason"]) == ("a2a", "external_event")
    required = [e["payload"] for e in run_events(oauth_harbor, run_id) if e["type"] == "a2a.auth_required"][-1]
    assert required["SourceName"] == "Demo Calendar" and required["Scopes"] == ["calendar.read"]
    assert required["AuthorizeURL"].startswith(f"{oauth_harbor.url}/accounts/sign-in/begin/?state=")
    assert required["PauseToken"].startswith("hrbp_") and required["RemoteTaskID"]
    inbox = alice.get("/inbox/").text
    assert "Sign in to Demo Calendar" in inbox and 'type="password"' not in inbox

    # Anyone else's resume sends nothing: the desk asks again, under a new sign-in.
    admin = signed_in(oauth_harbor, "admin")  # an admin may decide the tenant's a2a pauses
    decide(admin, pause["id"], method="resume")
    wait_status(oauth_harbor, run_id, "paused")
    again = open_pause(oauth_harbor, run_id)
    assert again["id"] != pause["id"] and again["payload"]["AuthorizeURL"] != required["AuthorizeURL"]
    assert again["payload"]["RemoteTaskID"] == required["RemoteTaskID"]

    callback = ProviderBrowser(live_provider, "alice").consent(begin(alice, again["payload"]["AuthorizeURL"]))
    page = alice.get(callback)
    assert page.status_code == 200 and "Authorization complete" in page.text

    wait_status(oauth_harbor, run_id, "paused")
    question = open_pause(oauth_harbor, run_id)
    assert (question["reason"], question["payload"]["Question"]) == ("await_input", "Which date do you want to fly?")
    assert question["payload"]["RemoteTaskID"] == required["RemoteTaskID"]  # the same remote task went on
    decide(alice, question["id"], method="resume", input="June 9")
    done = wait_status(oauth_harbor, run_id, "complete")
    assert "Lima on June 9" in done["answer"]
    assert [state for state, _ in pause_states(oauth_harbor, run_id)] == ["resumed"] * 3
    types = [e["type"] for e in run_events(oauth_harbor, run_id)]
    assert types.count("a2a.auth_required") == 2 and "tool.auth_completed" in types
    stored = in_server(
        oauth_harbor,
        f"print(json.dumps([str(p.decision_input) for p in Pause.objects.filter(run_id={run_id!r})]))",
    )
    assert all("hrb" not in value and len(value) < 40 for value in stored)  # no token kept with a pause
