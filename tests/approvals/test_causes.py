"""Pause causes are registered (approvals.causes): the product holds the wire's four, and a
cause defined in this module alone (its own spec, templates, answer rule and resolve hook),
in a registry of its own, is parked, shown in the inbox and on the run page, and resumed
through the same services and pages as the product's."""

import pytest
from django.core import checks
from django.db import transaction
from django.template import engines
from django.test import Client

from approvals import causes
from approvals.domain.services import pause_park
from approvals.models import Cause, Decision, Pause, PauseState, Reason
from runs.application import run_start
from runs.kernel.errors import PayloadInvalid
from runs.models import Role, Run, RunStatus
from tests.runs.api.conftest import TRUSTED_PEM, Api


def signed_in(name: str) -> Client:
    client = Client()
    client.login(username=name, password=f"{name}-password")
    return client


# --- The product's registry ---------------------------------------------------------------------


def test_the_product_registers_exactly_the_wires_causes():
    assert causes.registry.names() == frozenset(Cause.values) == {"hitl_approval", "tool_oauth", "a2a", "operator"}
    assert causes.active() is causes.registry
    assert [message.id for message in checks.run_checks() if (message.id or "").startswith("approvals.")] == []
    gates = {cause.name for cause in causes.registry.all() if cause.is_gate}
    assert gates == {"hitl_approval"}


def test_the_protocol_refuses_a_cause_off_the_wire(people, settings):
    settings.HARBOR_JWT_PUBLIC_KEYS, settings.HARBOR_JWT_DEV_KEYS = TRUSTED_PEM, False
    api = Api()
    for name in Cause.values:
        assert api.ok("/v1/pause/list", {"filter": {"causes": [name]}})["total_rows"] == 0
    api.error("/v1/pause/list", {"filter": {"causes": ["stand_in"]}}, status=400, code="invalid_request")


def test_nothing_parks_on_a_cause_nobody_registered(people):
    run, _ = run_start(caller=people.caller("alice"), query="count to 3", agent_id="countdown")
    with pytest.raises(causes.UnknownCause), transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        pause_park(run=locked, cause="stand_in", reason=Reason.AWAIT_INPUT, payload={}, step=0)
    assert not Pause.objects.exists()


# --- A cause of this module's own ---------------------------------------------------------------

CARD = engines["django"].from_string(
    '{% extends "approvals/cards/_frame.html" %}'
    "{% block title %}The stand-in wants a word{% endblock %}"
    "{% block body %}<p data-stand-in>Say the word about {{ pause.payload.Topic }}.</p>{% endblock %}"
)
RUN_PAGE = engines["django"].from_string(
    "<p data-stand-in>The stand-in waits for a word about {{ pause.payload.Topic }}.</p>"
)
resolved: list[tuple[str, str, object]] = []


def the_word(pause: Pause, value: object) -> object:
    if value != "please":
        raise PayloadInvalid("the word is please")
    return {"word": value, "topic": pause.payload["Topic"]}


def note_resolved(pause: Pause) -> None:
    resolved.append((pause.pk, pause.decision, pause.decision_input))


STAND_IN = causes.PauseCause(
    name="stand_in",
    reasons=frozenset({Reason.AWAIT_INPUT}),
    decisions=frozenset({Decision.RESUME}),
    deciders=frozenset({Role.APPROVER}),
    card_template=CARD,
    run_template=RUN_PAGE,
    answer_label="The word",
    answer=the_word,
    on_resolve=note_resolved,
)


@pytest.fixture
def stand_in():
    resolved.clear()
    with causes.isolated(STAND_IN) as registry:
        yield registry
    assert causes.active() is causes.registry


def parked_on_stand_in(people) -> tuple[Run, Pause]:
    run, _ = run_start(caller=people.caller("alice"), query="count to 3", agent_id="countdown")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        locked.status = RunStatus.RUNNING
        locked.save()
        pause, _ = pause_park(run=locked, cause="stand_in", reason=Reason.AWAIT_INPUT, payload={"Topic": "tea"}, step=0)
    return run, pause


def test_an_isolated_registry_holds_its_causes_alone(stand_in):
    assert causes.active() is stand_in and stand_in.names() == {"stand_in"}
    assert causes.get("stand_in") is STAND_IN
    with pytest.raises(causes.UnknownCause):
        causes.get("hitl_approval")


def test_a_cause_of_its_own_shows_its_card_to_the_roles_it_names(people, stand_in):
    run, pause = parked_on_stand_in(people)
    page = signed_in("bob").get("/inbox/").content.decode()  # an approver: the stand-in's deciders
    assert f'id="pause-{pause.pk}"' in page and 'class="card cause-stand_in"' in page
    assert "The stand-in wants a word" in page and "Say the word about tea." in page
    assert "Nothing waits for you." in signed_in("olivia").get("/inbox/").content.decode()  # an operator: not hers

    run_page = signed_in("bob").get(f"/console/runs/{run.pk}/").content.decode()
    assert "The stand-in waits for a word about tea." in run_page
    assert '<label for="c-input">The word</label>' in run_page
    assert 'data-control="resume"' in run_page and 'data-control="approve"' not in run_page


def test_a_cause_of_its_own_is_resumed_through_its_answer_rule_and_hook(people, stand_in):
    run, pause = parked_on_stand_in(people)
    bob = signed_in("bob")
    decide = f"/inbox/pauses/{pause.pk}/decide/"

    refused = bob.post(decide, {"method": "resume", "input": "now"}, follow=True).content.decode()
    assert "the word is please" in refused
    not_a_gate = bob.post(decide, {"method": "approve"}, follow=True).content.decode()
    assert "a stand_in pause takes resume" in not_a_gate
    pause.refresh_from_db()
    assert pause.state == PauseState.PAUSED and resolved == []

    bob.post(decide, {"method": "resume", "input": "please"})
    pause.refresh_from_db()
    run.refresh_from_db()
    assert (pause.state, pause.decision) == (PauseState.RESUMED, Decision.RESUME)
    assert pause.decided_by is not None and pause.decided_by.username == "bob"
    assert resolved == [(pause.pk, Decision.RESUME, {"word": "please", "topic": "tea"})]
    assert run.status == RunStatus.RUNNING  # moved on, the answer in its checkpoint
    assert run.checkpoint["resolution"]["input"] == {"word": "please", "topic": "tea"}
