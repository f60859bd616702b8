"""A remote agent's question to a run started from the pages is its owner's on every login
(PROTOCOL §4): alice answers it after signing in again; bob (an approver), who may see the
run, reads whom it waits for, with no answer form; a remote sign-in is offered to alice
alone, not to an admin who may decide the pause."""

from django.test import Client

from approvals.models import Pause, Reason
from runs.models import Run, RunStatus
from runs.runtime.dispatch import drain
from tests.a2a.helpers import configure, open_pause


def signed_in(name: str) -> Client:
    client = Client()
    client.login(username=name, password=f"{name}-password")
    return client


def test_alice_answers_her_remote_agent_after_signing_in_again_and_bob_sees_whom_it_waits_for(people_tx, travel_desk):
    configure(people_tx, travel_desk.url)
    first = signed_in("alice")
    started = first.post("/console/new/", {"agent_id": "trip", "query": "Book a flight to Riga", "priority": 0})
    assert started.status_code == 302
    run = Run.objects.get()
    drain()
    question = open_pause(run)
    assert question.reason == Reason.AWAIT_INPUT and question.identity_session == "pages"
    first.post("/logout/")

    again = signed_in("alice")  # a new login session: the question is still hers
    page = again.get("/inbox/").content.decode()
    assert "Which date do you want to fly?" in page and "Your answer" in page and "Waiting for" not in page
    run_page = again.get(f"/console/runs/{run.pk}/").content.decode()
    assert "data-not-yours" not in run_page

    bob = signed_in("bob")  # an approver sees the run, may not answer its remote agent
    assert f'id="pause-{question.pk}"' not in bob.get("/inbox/").content.decode()
    bob_sees = bob.get(f"/console/runs/{run.pk}/").content.decode()
    assert (
        "Which date do you want to fly?" in bob_sees and "Not yours to decide: this pause waits for alice," in bob_sees
    )

    answered = again.post(f"/inbox/pauses/{question.pk}/decide/", {"method": "resume", "input": "July 4"})
    assert answered.status_code == 302 and Pause.objects.get(pk=question.pk).decision == "resume"
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and "Riga on July 4" in run.answer


def test_a_remote_sign_in_is_offered_to_its_owner_only(people_tx, travel_desk):
    """An admin may decide the pause (a credential); bob may only see it."""
    configure(people_tx, travel_desk.url)
    alice = signed_in("alice")
    alice.post("/console/new/", {"agent_id": "trip", "query": "Book a flight to Riga, it needs auth", "priority": 0})
    drain()
    pause = Pause.objects.get(state="paused")
    assert pause.reason == Reason.EXTERNAL_EVENT
    bob = signed_in("bob").get(f"/console/runs/{pause.run_id}/").content.decode()
    assert "Not yours to decide: this pause waits for alice," in bob and 'type="password"' not in bob
    ada = signed_in("ada").get("/inbox/").content.decode()  # decides by role: the credential form
    assert f'id="pause-{pause.pk}"' in ada and "A remote agent needs alice to sign in" in ada
    mine = signed_in("alice").get("/inbox/").content.decode()
    assert "A remote agent needs you to sign in" in mine and "Waiting for" not in mine
