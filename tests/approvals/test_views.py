"""The approvals inbox: what it lists, how it decides, and how it refuses."""

import re

import pytest
from django.test import Client

from approvals.models import Decision, Pause, PauseState
from runs.application import run_start
from runs.models import RunStatus
from runs.runtime.dispatch import drain
from tests.factories import PauseFactory


def parked_deploy(people, query="deploy build 7 to production", user="alice"):
    pause = PauseFactory.create(caller=people.caller(user), query=query, agent_id="deploy")
    assert pause.run.status == RunStatus.PAUSED and pause.state == PauseState.PAUSED
    return pause.run, pause


def signed_in(client, name):
    client.login(username=name, password=f"{name}-password")
    return client


def test_the_inbox_needs_a_login(client, people):
    response = client.get("/inbox/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_an_approver_sees_the_gate_with_its_tool_args_reason_and_owner(client, people):
    run, pause = parked_deploy(people)
    page = signed_in(client, "bob").get("/inbox/").content.decode()
    assert f'id="pause-{pause.pk}"' in page
    assert "deploy_to_production" in page and "deploying changes production" in page
    assert 'name="arg-build" value="7"' in page  # editable gate: the editor
    assert "alice" in page and "Yes, reject for good" in page


def test_the_inbox_is_empty_for_people_who_may_decide_nothing(client, people):
    parked_deploy(people)
    for name in ("mallory", "gina", "olivia"):  # another member, another tenant, an operator (gates are approvers')
        page = signed_in(Client(), name).get("/inbox/").content.decode()
        assert "Nothing waits for you." in page and "deploy_to_production" not in page


def test_approving_with_edited_args_runs_the_edited_call(client, people):
    run, pause = parked_deploy(people)
    response = signed_in(client, "bob").post(
        f"/inbox/pauses/{pause.pk}/decide/",
        {"method": "approve", "arg-environment": "staging", "arg-build": "7", "reason": "staging first"},
        follow=True,
    )
    assert "Approved deploy_to_production" in response.content.decode()
    pause.refresh_from_db()
    assert (pause.decision, pause.decided_by.username, pause.decision_reason) == (
        Decision.APPROVE,
        "bob",
        "staging first",
    )
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and run.answer == "Deployed build 7 to staging."


def test_the_editor_is_drawn_from_the_tools_argument_schema(client, people):
    _, pause = parked_deploy(people)
    page = signed_in(client, "bob").get("/inbox/").content.decode()
    select = re.search(r'<select id="arg-%s-environment"[^>]*>(.*?)</select>' % pause.pk, page, re.S)
    assert select and " required" in select.group(0)
    assert re.findall(r'<option value="(\w+)"', select.group(1)) == ["staging", "production"]
    assert '<option value="production" selected>' in select.group(1)
    build = re.search(r'<input id="arg-%s-build"[^>]*>' % pause.pk, page)
    assert build and " required" in build.group(0) and 'pattern="^[A-Za-z0-9][A-Za-z0-9._\\-]{0,63}$"' in build.group(0)
    assert page.count('<span class="required">(required)</span>') == 2


def test_an_edit_the_schema_refuses_is_shown_beside_its_field_and_decides_nothing(client, people):
    run, pause = parked_deploy(people)
    response = signed_in(client, "bob").post(
        f"/inbox/pauses/{pause.pk}/decide/",
        {"method": "approve", "arg-environment": "production", "arg-build": "not-a-build; rm -rf /"},
    )
    assert response.status_code == 422
    page = response.content.decode()
    error = re.search(r'<p class="field-error" id="arg-%s-build-error"[^>]*>([^<]*)</p>' % pause.pk, page)
    assert error and error.group(1).startswith("not a build name")
    assert 'value="not-a-build; rm -rf /"' in page  # as typed, to fix
    pause.refresh_from_db()
    assert pause.is_open and pause.decision == ""
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED


def test_reject_is_terminal_and_a_second_decision_is_shown_plainly(client, people):
    run, pause = parked_deploy(people)
    bob = signed_in(client, "bob")
    bob.post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "reject", "reason": "not today"})
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.failure_code == "constraints_conflict"
    again = bob.post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve"}, follow=True).content.decode()
    assert "Already decided" in again
    history = bob.get("/inbox/history/").content.decode()
    assert "not today" in history and "reject" in history and "bob" in history


def test_no_permission_is_shown_plainly_and_changes_nothing(client, people):
    run, pause = parked_deploy(people)
    page = signed_in(client, "olivia").post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve"}, follow=True)
    assert "Not allowed" in page.content.decode()
    assert Pause.objects.get(pk=pause.pk).state == PauseState.PAUSED


def test_another_tenant_cannot_find_the_pause(client, people):
    _, pause = parked_deploy(people)
    page = signed_in(client, "gina").post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve"}, follow=True)
    assert "Not found" in page.content.decode()
    assert Pause.objects.get(pk=pause.pk).state == PauseState.PAUSED


def test_decisions_need_a_csrf_token(people):
    _, pause = parked_deploy(people)
    client = Client(enforce_csrf_checks=True)
    client.login(username="bob", password="bob-password")
    assert client.post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve"}).status_code == 403
    assert Pause.objects.get(pk=pause.pk).state == PauseState.PAUSED
    page = client.get("/inbox/").content.decode()
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found, page[:300]
    token = found.group(1)
    ok = client.post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve", "csrfmiddlewaretoken": token})
    assert ok.status_code == 302 and Pause.objects.get(pk=pause.pk).decision == Decision.APPROVE


def test_the_owner_decides_own_pause_from_the_same_web_session(client, people):
    """A run started from the browser parks with the page's session: its owner sees and
    decides its gate there."""
    alice = signed_in(client, "alice")
    alice.post("/console/new/", {"agent_id": "deploy", "query": "deploy build 9 to staging", "priority": 0})
    drain()
    page = alice.get("/inbox/").content.decode()
    pause = Pause.objects.get(state=PauseState.PAUSED)
    assert f'id="pause-{pause.pk}"' in page and pause.identity_session == "pages"
    alice.post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve"})
    assert Pause.objects.get(pk=pause.pk).decision == Decision.APPROVE


def test_the_fragment_lists_only_cards(client, people):
    _, pause = parked_deploy(people)
    fragment = signed_in(client, "bob").get("/inbox/?fragment=cards").content.decode()
    assert fragment.lstrip().startswith('<div class="cards"') and f"pause-{pause.pk}" in fragment


@pytest.mark.parametrize(
    "payload",
    [{"Question": "Which region?"}, {"SourceName": "GitHub", "AuthorizeURL": "https://example.test/authorize"}],
)
def test_other_causes_render_their_own_intervention(client, people, payload):
    """A2A shows the question and an answer form; OAuth whose sign-in it waits for (rendered
    from the pause itself; the parking is the runtime's business)."""
    from django.db import transaction

    from approvals.domain.services import pause_park
    from runs.models import Run

    run, _ = run_start(caller=people.caller("alice"), query="count to 3", agent_id="countdown")
    cause = "a2a" if "Question" in payload else "tool_oauth"
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        locked.status = RunStatus.RUNNING
        locked.save()
        pause_park(
            run=locked,
            cause=cause,
            reason="await_input" if cause == "a2a" else "external_event",
            payload=payload,
            step=0,
        )
    page = signed_in(client, "ada").get("/inbox/").content.decode()
    if cause == "a2a":
        assert "Which region?" in page and 'name="input"' in page
        assert "Which region?" in signed_in(client, "alice").get(f"/console/runs/{run.pk}/").content.decode()
    else:
        # The sign-in is alice's own (her program's session): an admin reads whom it waits for.
        assert "Waiting for alice (session s1) to sign in to GitHub." in page
        assert 'href="https://example.test/authorize"' not in page and "Sign in to GitHub" not in page


def test_a_javascript_authorize_url_is_never_a_link(client, people):
    from approvals.web.views import pause_card

    card = pause_card(Pause(payload={"AuthorizeURL": "javascript:alert(1)", "SourceName": "x"}), may_decide=True)
    assert card["authorize_url"] == ""
