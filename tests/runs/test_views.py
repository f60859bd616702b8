"""The operator console: home by role, the runs list, the run page's scope-limited
controls, steering through the services, and the start form."""

import re

import pytest
from django.test import Client

from approvals.models import Cause, PauseState
from runs.application import run_start
from runs.models import Run, RunStatus, SteeringInstruction
from runs.runtime.dispatch import drain
from tests.factories import UserFactory

CONTROLS = (
    "pause",
    "resume",
    "approve",
    "reject",
    "redirect",
    "inject_context",
    "user_message",
    "prioritize",
    "cancel",
)


def signed_in(name: str) -> Client:
    client = Client()
    assert client.login(username=name, password=f"{name}-password")
    return client


def controls_on(page: str) -> set[str]:
    return set(re.findall(r'data-control="(\w+)"', page))


def countdown(people, user="alice", n=50) -> Run:
    run, _ = run_start(caller=people.caller(user), query=f"count to {n}", agent_id="countdown")
    return run


@pytest.mark.parametrize(
    "user, target",
    [
        ("bob", "/inbox/"),
        ("olivia", "/console/"),
        ("ada", "/console/"),
        ("alice", "/console/"),
    ],
)
def test_home_sends_each_person_where_they_work(people, user, target):
    assert signed_in(user).get("/")["Location"] == target


def test_home_and_pages_need_a_login(client, people):
    for url in ("/", "/console/", "/console/new/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_person_without_a_tenant_is_told_so(people):
    UserFactory.create(username="drifter")
    response = signed_in("drifter").get("/console/")
    assert response.status_code == 403 and "not a member" in response.content.decode()


def test_login_page_signs_in_and_lands_by_role(client, people):
    assert "Sign in to Harbor" in client.get("/login/").content.decode()
    response = client.post("/login/", {"username": "bob", "password": "bob-password"}, follow=True)
    assert response.redirect_chain[-1][0] == "/inbox/"
    bad = Client().post("/login/", {"username": "bob", "password": "nope"})
    assert "do not match" in bad.content.decode()


def test_the_runs_list_shows_what_each_person_may_see(people):
    alices = countdown(people, "alice")
    mallorys = countdown(people, "mallory")
    ginas = countdown(people, "gina")
    olivia = signed_in("olivia").get("/console/").content.decode()
    assert alices.pk in olivia and mallorys.pk in olivia and ginas.pk not in olivia
    alice = signed_in("alice").get("/console/").content.decode()
    assert alices.pk in alice and mallorys.pk not in alice
    gina = signed_in("gina").get("/console/").content.decode()
    assert ginas.pk in gina and alices.pk not in gina


def test_the_runs_list_filters_by_status_and_serves_its_rows_fragment(people):
    done = countdown(people, n=1)
    drain()
    queued = countdown(people)
    olivia = signed_in("olivia")
    complete = olivia.get("/console/?status=complete").content.decode()
    assert done.pk in complete and queued.pk not in complete
    rows = olivia.get("/console/?fragment=rows&status=pending").content.decode()
    assert "<tbody data-rows>" in rows and "data-filters" in rows and queued.pk in rows and done.pk not in rows


def test_a_run_of_another_tenant_or_member_is_not_found(people):
    run = countdown(people)
    assert signed_in("gina").get(f"/console/runs/{run.pk}/").status_code == 404
    assert signed_in("mallory").get(f"/console/runs/{run.pk}/").status_code == 404
    assert signed_in("gina").post(f"/console/runs/{run.pk}/steer/cancel/").status_code == 404
    assert Run.objects.get(pk=run.pk).status == RunStatus.PENDING


def test_controls_follow_the_callers_scope(people):
    run = countdown(people)
    owner = controls_on(signed_in("alice").get(f"/console/runs/{run.pk}/").content.decode())
    assert owner == {"pause", "redirect", "inject_context", "user_message", "cancel"}  # no prioritize: admin only
    operator = controls_on(signed_in("olivia").get(f"/console/runs/{run.pk}/").content.decode())
    assert operator == owner
    admin = controls_on(signed_in("ada").get(f"/console/runs/{run.pk}/").content.decode())
    assert admin == owner | {"prioritize"}
    approver = signed_in("bob").get(f"/console/runs/{run.pk}/").content.decode()
    assert controls_on(approver) == set() and "allows no steering" in approver


def test_an_operator_pauses_redirects_and_resumes_from_the_console(people):
    run = countdown(people, n=3)
    olivia = signed_in("olivia")
    olivia.post(f"/console/runs/{run.pk}/steer/pause/", {"event_id": "e1"})
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and run.pauses.get().cause == Cause.OPERATOR
    page = olivia.get(f"/console/runs/{run.pk}/").content.decode()
    assert "resume" in controls_on(page) and "pause" not in controls_on(page)
    olivia.post(f"/console/runs/{run.pk}/steer/redirect/", {"goal": "count slowly"})
    olivia.post(f"/console/runs/{run.pk}/steer/user_message/", {"message": "hello"})
    olivia.post(f"/console/runs/{run.pk}/steer/inject_context/", {"context": '{"region": "eu"}'})
    pause = run.pauses.get()
    response = olivia.post(f"/console/runs/{run.pk}/steer/resume/", {"pause": pause.pk}, follow=True)
    assert "Resumed." in response.content.decode()
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and "Goal: count slowly" in run.answer
    assert run.messages == ["hello"] and run.context == [{"region": "eu"}]
    assert run.pauses.get().state == PauseState.RESUMED


def test_a_repeated_submission_is_applied_once(people):
    run = countdown(people)
    olivia = signed_in("olivia")
    olivia.post(f"/console/runs/{run.pk}/steer/user_message/", {"message": "once", "event_id": "same"})
    again = olivia.post(
        f"/console/runs/{run.pk}/steer/user_message/", {"message": "once", "event_id": "same"}, follow=True
    )
    assert "not sent twice" in again.content.decode()
    assert SteeringInstruction.objects.filter(run=run, instruction="user_message").count() == 1


def test_errors_are_shown_plainly(people):
    run = countdown(people)
    alice = signed_in("alice")
    empty = alice.post(f"/console/runs/{run.pk}/steer/redirect/", {"goal": "  "}, follow=True).content.decode()
    assert "Give the new goal" in empty
    forbidden = alice.post(f"/console/runs/{run.pk}/steer/prioritize/", {"priority": "5"}, follow=True).content.decode()
    assert "Not allowed" in forbidden and Run.objects.get(pk=run.pk).priority == 0
    unknown = alice.post(f"/console/runs/{run.pk}/steer/explode/", follow=True).content.decode()
    assert "Unknown steering method" in unknown
    ada = signed_in("ada")
    ada.post(f"/console/runs/{run.pk}/steer/prioritize/", {"priority": "7"})
    assert Run.objects.get(pk=run.pk).priority == 7
    cancelled = ada.post(f"/console/runs/{run.pk}/steer/cancel/", {"hard": "on"}, follow=True).content.decode()
    assert "Cancelled." in cancelled and "step boundary" not in cancelled  # a queued run: at once
    ended = ada.post(f"/console/runs/{run.pk}/steer/pause/", follow=True).content.decode()
    assert "Not found" in ended and "nothing left to steer" in ended


def test_steering_needs_a_csrf_token(people):
    run = countdown(people)
    client = Client(enforce_csrf_checks=True)
    client.login(username="olivia", password="olivia-password")
    assert client.post(f"/console/runs/{run.pk}/steer/cancel/").status_code == 403
    assert (
        client.post("/console/new/", {"agent_id": "countdown", "query": "count to 2", "priority": 0}).status_code == 403
    )
    assert Run.objects.get(pk=run.pk).status == RunStatus.PENDING and Run.objects.count() == 1


def test_start_a_run_from_the_browser(people):
    alice = signed_in("alice")
    form = alice.get("/console/new/").content.decode()
    assert 'value="deploy"' in form and 'value="countdown"' in form
    response = alice.post("/console/new/", {"agent_id": "countdown", "query": "count to 2", "priority": -3})
    run = Run.objects.get()
    assert response["Location"] == f"/console/runs/{run.pk}/"
    assert (run.owner.username, run.agent_id, run.priority) == ("alice", "countdown", -3) and run.session == "pages"
    bad = alice.post("/console/new/", {"agent_id": "nope", "query": "", "priority": 0}).content.decode()
    assert "This field is required" in bad and Run.objects.count() == 1


def test_the_same_start_form_sent_twice_starts_one_run(people):
    alice = signed_in("alice")
    form = alice.get("/console/new/").content.decode()
    found = re.search(r'name="submission" value="([^"]+)"', form)
    assert found is not None
    submission = found.group(1)
    sent = {"agent_id": "countdown", "query": "count to 2", "priority": 0, "submission": submission}
    first, second = alice.post("/console/new/", sent), alice.post("/console/new/", sent)
    assert first["Location"] == second["Location"] and Run.objects.count() == 1
    assert '<label for="id_submission"' not in form  # a hidden field, not a labelled one
    alice.post("/console/new/", {**sent, "submission": "another"})
    assert Run.objects.count() == 2


def test_a_pages_fetch_after_its_tenant_was_switched_elsewhere_is_told_to_reload(people):
    olivia = signed_in("olivia")  # an operator in acme and globex, working in acme
    assert olivia.get("/console/?fragment=rows", HTTP_X_HARBOR_TENANT="acme").status_code == 200
    assert olivia.get("/console/?fragment=rows", HTTP_X_HARBOR_TENANT="globex").status_code == 409
    assert 'data-tenant="acme"' in olivia.get("/console/").content.decode()


def test_a_missing_page_and_an_expired_form_get_harbors_own_pages(people):
    alice = signed_in("alice")
    missing = alice.get("/console/runs/DOESNOTEXIST/")
    assert missing.status_code == 404 and "harbor.css" in missing.content.decode()
    client = Client(enforce_csrf_checks=True)
    client.login(username="alice", password="alice-password")
    expired = client.post("/console/new/", {"agent_id": "countdown", "query": "count to 2", "priority": 0})
    assert expired.status_code == 403 and "This form has expired" in expired.content.decode()
    assert "<style" not in expired.content.decode()  # the CSP allows no inline style


def test_the_run_page_shows_timeline_pause_and_state_fragment(people):
    run, _ = run_start(caller=people.caller("alice"), query="deploy build 5 to production", agent_id="deploy")
    drain()
    bob = signed_in("bob")
    page = bob.get(f"/console/runs/{run.pk}/").content.decode()
    assert "tool.approval_requested" in page and "deploy_to_production" in page
    assert controls_on(page) == {"approve", "reject"}  # an approver decides the gate, steers nothing
    assert "hrbp_" not in page  # the page never carries a resume token
    assert "data-not-yours" not in page and "open in the inbox" in page
    # Alice, signed in on the pages (another session than the run's): told why she cannot decide.
    hers = signed_in("alice").get(f"/console/runs/{run.pk}/").content.decode()
    assert "data-not-yours" in hers and "open in the inbox" not in hers and not controls_on(hers) & {"approve"}
    state = bob.get(f"/console/runs/{run.pk}/?fragment=state").content.decode()
    assert state.lstrip().startswith("<div data-state>") and 'data-key="paused:' in state
    pause = run.pauses.get()
    bob.post(f"/console/runs/{run.pk}/steer/approve/", {"pause": pause.pk, "reason": "ok"})
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and run.answer == "Deployed build 5 to production."
