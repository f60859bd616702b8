"""The admin audit: read-only history, filters, links from a run, and no tokens."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders

from approvals.models import Pause
from runs.application import steering_submit
from runs.domain.tokens import token_unseal
from runs.runtime.dispatch import drain
from tests.factories import PauseFactory, SuperuserFactory


@pytest.fixture
def audited(people, client):
    pause = PauseFactory.create(caller=people.caller("alice"), query="deploy build 9 to production", agent_id="deploy")
    run, token = pause.run, token_unseal(pause.token_sealed)
    steering_submit(caller=people.caller("bob", "web"), run_id=run.pk, method="approve", payload={"reason": "ok"})
    pause.refresh_from_db()
    admin = SuperuserFactory.create(username="root")
    client.force_login(admin)
    return run, pause, token


@pytest.mark.parametrize(
    "model",
    [
        "approvals/pause",
        "runs/event",
        "runs/steeringinstruction",
        "runs/run",
        "approvals/decisionrefusal",
        "runs/toolcall",
    ],
)
def test_audit_changelists_render_and_refuse_writes(audited, client, model):
    assert client.get(f"/admin/{model}/").status_code == 200
    assert client.get(f"/admin/{model}/add/").status_code == 403


def test_a_pause_page_shows_the_decision_but_never_the_token(audited, client):
    run, pause, token = audited
    page = client.get(f"/admin/approvals/pause/{pause.pk}/change/").content.decode()
    assert "bob" in page and "acme/alice/s1" in page and "Approve" in page
    assert token not in page and pause.token_digest not in page and pause.token_sealed not in page
    assert client.post(f"/admin/approvals/pause/{pause.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Pause.objects.filter(pk=pause.pk).exists()


def test_filters_and_the_run_links_to_its_pauses_and_events(audited, client):
    run, pause, _ = audited
    for query in (
        "cause__exact=hitl_approval",
        "state__exact=resumed",
        "decision__exact=approve",
        f"tenant__id__exact={run.tenant_id}",
        f"decided_by__id__exact={pause.decided_by_id}",
    ):
        listing = client.get(f"/admin/approvals/pause/?{query}")
        assert listing.status_code == 200 and pause.pk in listing.content.decode(), query
    run_page = client.get(f"/admin/runs/run/{run.pk}/change/").content.decode()
    assert f"/admin/approvals/pause/?run__id__exact={run.pk}" in run_page
    assert f"/admin/runs/event/?run__id__exact={run.pk}" in run_page


def test_the_tool_call_ledger_is_in_the_admin_and_on_the_run_page(audited, client):
    run, _, _ = audited
    drain()  # the approved deploy runs: two steps, one completed execution each
    listing = client.get(f"/admin/runs/toolcall/?run__id__exact={run.pk}").content.decode()
    assert (
        listing.count('<td class="field-outcome">Completed</td>') == 2
        and "check_build" in listing
        and "deploy_to_production" in listing
    )
    assert client.get("/admin/runs/toolcall/add/").status_code == 403
    assert (
        f"/admin/runs/toolcall/?run__id__exact={run.pk}"
        in client.get(f"/admin/runs/run/{run.pk}/change/").content.decode()
    )
    client.force_login(get_user_model().objects.get(username="alice"))
    page = client.get(f"/console/runs/{run.pk}/").content.decode()
    assert 'data-tool-call="0:1" data-outcome="completed"' in page
    assert 'data-tool-call="1:1" data-outcome="completed"' in page


def test_the_browsers_favicon_request_finds_the_icon(client):
    """The admin's pages name no icon, so a browser asks for /favicon.ico."""
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == "/static/harbor/favicon.svg"
    assert finders.find("harbor/favicon.svg")  # served from the static files (collected in production)


def _exported(client, pause, action):
    return client.post("/admin/approvals/pause/", {"action": action, "_selected_action": [pause.pk]})


def test_decision_records_export_as_json_and_csv_to_the_second_and_never_the_token(audited, client):
    import csv
    import io
    import json

    run, pause, token = audited
    answer = _exported(client, pause, "export_json")
    assert answer.status_code == 200 and answer["Content-Disposition"] == 'attachment; filename="pauses.json"'
    (record,) = json.loads(answer.content)
    assert record["pause"] == pause.pk and record["run"] == run.pk and record["tool"] == "deploy_to_production"
    assert record["requested_by"] == "alice" and record["decided_by"] == "bob"
    assert record["decision"] == "approve" and record["decision_reason"] == "ok"
    assert record["decided_at"] == pause.decided_at.isoformat(timespec="seconds")
    assert record["decided_at"].endswith("+00:00")  # the second and the zone, never the minute alone
    assert record["arguments"] == pause.payload["Args"]

    answer = _exported(client, pause, "export_csv")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/csv")
    (row,) = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert (
        row["pause"] == pause.pk
        and row["decided_by"] == "bob"
        and json.loads(row["arguments"]) == pause.payload["Args"]
    )
    for body in (_exported(client, pause, "export_json").content, answer.content):
        assert token.encode() not in body and pause.token_digest.encode() not in body


def test_a_csv_cell_that_would_start_a_formula_is_text():
    from approvals.domain.records import records_csv

    sheet = records_csv([{"pause": "p", "tool": "=HYPERLINK(1)", "arguments": {"a": 1}}])
    assert "'=HYPERLINK(1)" in sheet and '"{""a"": 1}"' in sheet


def test_the_pause_list_filters_by_tool_and_day(audited, client):
    run, pause, _ = audited
    day = pause.created_at
    for query in ("tool__exact=deploy_to_production", f"created_at__year={day.year}&created_at__month={day.month}"):
        listing = client.get(f"/admin/approvals/pause/?{query}")
        assert listing.status_code == 200 and pause.pk in listing.content.decode(), query
