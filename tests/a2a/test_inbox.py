"""The inbox renders an A2A pause for its reason (a question, or a sign-in asking for a
credential) and its answer goes through the one decision path to the same remote task."""

import re

from approvals.models import Pause, Reason
from runs.models import RunStatus
from runs.runtime.dispatch import drain
from tests.a2a.helpers import configure, open_pause, remote, start


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found, "the page has a form with a CSRF token"
    return found.group(1)


def inbox(client, name: str) -> str:
    client.login(username=name, password=f"{name}-password")
    return client.get("/inbox/").content.decode()


def test_the_inbox_asks_for_a_credential_then_the_question_and_the_answers_reach_the_desk(
    client, people_tx, travel_desk
):
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Riga, it needs auth")
    drain()
    pause = open_pause(run)
    page = inbox(client, "ada")  # an admin may decide the tenant's a2a pauses
    assert "A remote agent needs alice (session s1) to sign in" in page and 'type="password"' in page
    assert "travel-desk" in page and "Sign in to the travel desk" in page
    assert "desk-code-42" not in page

    csrf = csrf_of(page)
    response = client.post(
        f"/inbox/pauses/{pause.pk}/decide/", {"csrfmiddlewaretoken": csrf, "method": "resume", "input": "desk-code-42"}
    )
    assert response.status_code == 302
    assert Pause.objects.get(pk=pause.pk).decision == "resume"
    drain()

    question = open_pause(run)
    assert question.reason == Reason.AWAIT_INPUT
    page = inbox(client, "ada")
    assert "Which date do you want to fly?" in page and "Your answer" in page
    csrf = csrf_of(page)
    client.post(f"/inbox/pauses/{question.pk}/decide/", {"csrfmiddlewaretoken": csrf, "method": "resume", "input": ""})
    assert open_pause(run).pk == question.pk  # an empty answer changes nothing
    client.post(
        f"/inbox/pauses/{question.pk}/decide/", {"csrfmiddlewaretoken": csrf, "method": "resume", "input": "July 4"}
    )
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and "Riga on July 4" in run.answer
    assert remote(travel_desk.url, question.payload["RemoteTaskID"]).state == "completed"
