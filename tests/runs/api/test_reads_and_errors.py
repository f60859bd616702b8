"""pause.list, tasks.list, tasks.get (PROTOCOL §2, §4), and every error code of §7 with its
HTTP status, as JSON, from one handler."""

import json

import pytest

from runs.kernel.errors import HTTP_STATUS
from runs.models import Run, SteeringInstruction
from runs.runtime.dispatch import drain


def _parked(api, user="alice", query="deploy build 1 to staging"):
    run = api.start(query, "deploy", user=user)
    drain()
    return run


# --- pause.list --------------------------------------------------------------------------------


def test_pause_list_snapshots_open_pauses_visible_to_the_caller(api):
    run = _parked(api)
    _parked(api, user="gina")
    body = api.ok("/v1/pause/list", {"identity": {}})
    assert (body["page"], body["page_size"], body["page_count"], body["total_rows"]) == (1, 50, 1, 1)
    snap = body["snapshots"][0]
    assert set(snap) == {
        "token",
        "pause_id",
        "reason",
        "cause",
        "state",
        "identity",
        "run",
        "paused_at",
        "resumed_at",
        "expires_at",
        "decision",
        "payload",
    }
    assert snap["token"].startswith("hrbp_") and snap["run"] == run
    assert (snap["reason"], snap["cause"], snap["state"], snap["decision"]) == (
        "approval_required",
        "hitl_approval",
        "paused",
        None,
    )
    assert snap["identity"] == {"tenant": "acme", "user": "alice", "session": "s1"}


def test_tokens_are_shown_only_to_those_who_may_decide(api):
    _parked(api)
    assert api.ok("/v1/pause/list", {}, user="bob")["snapshots"][0]["token"]  # delegated approver
    assert api.ok("/v1/pause/list", {}, user="olivia")["snapshots"][0]["token"] is None  # may see, not decide
    assert api.ok("/v1/pause/list", {}, session="s2")["snapshots"][0]["token"] is None  # not the pausing session
    assert api.ok("/v1/pause/list", {}, user="gina")["total_rows"] == 0  # another tenant


def test_pause_list_filters_and_pages(api):
    first = _parked(api)
    second = _parked(api)
    api.control("reject", first, {"reason": "no"})
    assert api.ok("/v1/pause/list", {})["total_rows"] == 1
    every = api.ok("/v1/pause/list", {"filter": {"status": "any"}, "page_size": 1})
    assert (every["total_rows"], every["page_count"], len(every["snapshots"])) == (2, 2, 1)
    assert every["snapshots"][0]["run"] == second
    decided = api.ok("/v1/pause/list", {"filter": {"status": "resumed"}})["snapshots"]
    assert [(s["run"], s["decision"]) for s in decided] == [(first, "reject")]
    assert api.ok("/v1/pause/list", {"filter": {"status": "any", "run_ids": [first]}})["total_rows"] == 1
    assert api.ok("/v1/pause/list", {"filter": {"causes": ["operator"]}})["total_rows"] == 0
    assert api.ok("/v1/pause/list", {"filter": {"reasons": ["approval_required"]}})["total_rows"] == 1
    assert api.ok("/v1/pause/list", {"filter": {"since": "2999-01-01T00:00:00Z"}})["total_rows"] == 0
    assert api.ok("/v1/pause/list", {"filter": {"until": "2999-01-01T00:00:00Z"}})["total_rows"] == 1
    assert api.ok("/v1/pause/list", {"page": 5})["snapshots"] == []


@pytest.mark.parametrize(
    "body",
    [
        {"page": 0},
        {"page": "1"},
        {"page_size": 201},
        {"page_size": 0},
        {"filter": {"status": "open"}},
        {"filter": {"run_ids": "R"}},
        {"filter": {"causes": ["weather"]}},
        {"filter": {"since": "yesterday"}},
        {"filter": []},
        {"filter": {"statuses": "any"}},  # a key it does not have: not a page left unfiltered
    ],
)
def test_pause_list_refuses_malformed_requests(api, body):
    api.error("/v1/pause/list", body, status=400, code="invalid_request")


# --- tasks.list and tasks.get ------------------------------------------------------------------


def test_tasks_list_pages_with_counts_by_status(api):
    runs = [api.start() for _ in range(3)]
    api.control("cancel", runs[0])
    api.start(user="gina")
    body = api.ok("/v1/tasks/list", {"identity": {}, "page_size": 2})
    assert (body["total_rows"], body["page_count"], len(body["tasks"])) == (3, 2, 2)
    assert body["counts"] == {"pending": 2, "running": 0, "paused": 0, "complete": 0, "failed": 0, "cancelled": 1}
    assert body["tasks"][0]["task_id"] == runs[2]
    pending = api.ok("/v1/tasks/list", {"filter": {"status": "pending"}})
    assert pending["total_rows"] == 2 and pending["counts"]["cancelled"] == 1
    child = api.ok("/v1/control/start", {"identity": {}, "query": "q", "agent_id": "countdown", "parent_run": runs[1]})[
        "task_id"
    ]
    assert [t["task_id"] for t in api.ok("/v1/tasks/list", {"filter": {"parent": runs[1]}})["tasks"]] == [child]
    assert api.ok("/v1/tasks/list", {}, user="gina")["total_rows"] == 1
    assert api.ok("/v1/tasks/list", {}, user="mallory")["total_rows"] == 0  # a member sees their own
    assert api.ok("/v1/tasks/list", {}, user="bob")["total_rows"] == 4  # an approver sees the tenant's


@pytest.mark.parametrize(
    "body",
    [
        {"filter": {"status": "done"}},
        {"page_size": "10"},
        {"filter": {"parent": 1}},
        {"filter": {"run_ids": ["01J0000000000000000000000A"]}},  # pause.list's key, not this one's
    ],
)
def test_tasks_list_refuses_malformed_requests(api, body):
    api.error("/v1/tasks/list", body, status=400, code="invalid_request")


def test_tasks_get_is_the_row_with_its_pauses_and_steering(api):
    run = _parked(api)
    api.control("approve", run, {"args": {"environment": "production"}, "reason": "go"}, event_id="e1")
    drain()
    body = api.ok("/v1/tasks/get", {"identity": {"run": run}})
    assert (body["task_id"], body["status"], body["answer"]) == (run, "complete", "Deployed build 1 to production.")
    assert [p["decision"] for p in body["pauses"]] == ["approve"]
    (steer,) = body["steering"]
    assert (steer["method"], steer["state"], steer["event_id"], steer["actor"]) == (
        "approve",
        "applied",
        "e1",
        {"user": "alice", "session": "s1"},
    )


def test_tasks_get_of_a_foreign_or_unknown_run_is_not_found(api):
    foreign = api.start(user="gina")
    api.error(
        "/v1/tasks/get", {"identity": {"run": foreign}}, user="ada", scopes=["admin"], status=404, code="not_found"
    )
    api.error("/v1/tasks/get", {"identity": {"run": "01UNKNOWN"}}, status=404, code="not_found")
    api.error("/v1/tasks/get", {"identity": {}}, status=400, code="invalid_request")


# --- every error code, as JSON --------------------------------------------------------------


def test_every_error_code_is_reachable_with_its_status(api, settings):
    """One request per code of PROTOCOL §7 (the table is runs.kernel.errors.HTTP_STATUS)."""
    seen = {}

    def record(path, body=None, **kwargs):
        response = api.post(path, body, **kwargs)
        seen[response.json()["code"]] = response.status_code

    run = _parked(api)
    record("/v1/control/start", {"identity": {}, "query": ""})  # invalid_request
    record("/v1/tasks/list", user=None)  # identity_required
    record("/v1/tasks/list", token="x.y.z")  # auth_rejected
    record("/v1/control/prioritize", {"identity": {"run": run}, "payload": {"priority": 1}})  # scope_mismatch
    record("/v1/control/cancel", {"identity": {"run": run, "scope": "admin"}})  # identity_scope_required
    record("/v1/tasks/get", {"identity": {"run": "01NONE"}})  # not_found
    record("/v1/control/fly", {"identity": {"run": run}})  # unknown_method
    api.control("approve", run, {})
    record("/v1/control/approve", {"identity": {"run": run}})  # already_resumed
    record("/v1/control/start", raw="x" * (70 * 1024))  # request_too_large
    record("/v1/control/start", {"identity": {}, "query": "x" * 5000})  # payload_invalid
    settings.HARBOR_REFUSALS_PER_IDENTITY = 0
    record("/v1/control/approve", {"identity": {"run": run}})  # rate_limited
    assert seen == {code: status for code, status in HTTP_STATUS.items() if code != "runtime_error"}


def test_an_unexpected_failure_is_a_json_500_runtime_error(api, monkeypatch, caplog):
    def explode(**kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("runs.protocol.views.run_start", explode)
    body = api.error("/v1/control/start", {"identity": {}, "query": "q"}, status=500, code="runtime_error")
    assert "boom" not in body["message"]
    assert "unexpected error" in caplog.text


@pytest.mark.parametrize(
    "payload, where",
    [
        ({"a": {"b": {"c": {"d": {"e": {"f": {}}}}}}}, "deeper"),
        ({f"k{n}": n for n in range(65)}, "keys"),
        ({"items": list(range(51))}, "items"),
        ({"s": "x" * 4097}, "characters"),
        ({f"k{n}": "x" * 4000 for n in range(5)}, "bytes"),
    ],
)
def test_payload_bounds_are_422_before_anything_else(api, payload, where):
    # Checked before identity: even an unknown run and no token answer 422.
    body = api.error(
        "/v1/control/inject_context",
        {"identity": {"run": "01NONE"}, "payload": payload},
        user=None,
        status=422,
        code="payload_invalid",
    )
    assert where in body["message"]


def test_a_payload_at_the_bounds_is_accepted(api):
    run = api.start()
    payload = {"a": {"b": {"c": {"d": {"e": "deep"}}}}, "items": list(range(50)), "s": "x" * 4096}
    assert api.control("inject_context", run, payload).status_code == 200
    assert SteeringInstruction.objects.get(run_id=run).payload == payload  # stored whole, never truncated


def test_an_oversized_body_is_413_before_parsing(api):
    response = api.post("/v1/control/start", raw=b"{" * (65 * 1024), user=None)
    assert (response.status_code, response.json()["code"]) == (413, "request_too_large")


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_is_invalid(api, raw):
    response = api.post("/v1/tasks/list", raw=raw)
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")


def test_a_body_without_identity_is_invalid(api):
    """Every method's body names the identity (`{}` at least: it comes from the token);
    without it the body is not the method's shape (PROTOCOL §3)."""
    for path, raw in (
        ("/v1/tasks/list", b""),
        ("/v1/tasks/list", b'{"page": 1}'),
        ("/v1/pause/list", b"{}"),
        ("/v1/control/start", b'{"query": "count to 3"}'),
        ("/v1/tasks/get", b"{}"),
        ("/v1/control/cancel", b"{}"),
    ):
        response = api.post(path, raw=raw)
        assert (response.status_code, response.json()["code"]) == (400, "invalid_request"), path
    assert not Run.objects.exists()
    assert api.post("/v1/tasks/list", raw=b'{"identity": {}}').json()["page"] == 1  # the rest has defaults


def test_curl_form_encoded_bodies_are_read_as_json(api):
    from .conftest import mint

    response = api.client.post(
        "/v1/tasks/list",
        data=json.dumps({"identity": {}, "page": 2}),
        content_type="application/x-www-form-urlencoded",
        HTTP_AUTHORIZATION=f"Bearer {mint('alice')}",
    )
    assert response.status_code == 200 and response.json()["page"] == 2


def test_wrong_methods_and_unknown_paths_are_json(api):
    response = api.client.get("/v1/control/start", HTTP_ACCEPT="text/html")
    assert (response.status_code, response.json()["code"], response["Allow"]) == (405, "invalid_request", "POST")
    for path in ("/v1/nope", "/v1/control/start/", "/v1/tasks"):
        response = api.client.post(path, data="{}", content_type="application/json")
        assert (response.status_code, response.json()["code"]) == (404, "not_found")
    response = api.client.post("/v1/events")
    assert response.status_code == 405 and response.json()["code"] == "invalid_request"


def test_csrf_does_not_apply_to_bearer_requests(api):
    from django.test import Client

    from .conftest import mint

    client = Client(enforce_csrf_checks=True)
    response = client.post(
        "/v1/control/start",
        data=json.dumps({"identity": {}, "query": "q", "agent_id": "countdown"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {mint('alice')}",
    )
    assert response.status_code == 200 and Run.objects.count() == 1


@pytest.mark.parametrize(
    "raw",
    [
        b'{"identity": {}, "query": "a\\u0000b"}',
        b'{"identity": {}, "query": "\\ud800"}',
        b'{"identity": {}, "query": "q", "x\\u0000": 1}',
    ],
)
def test_unstorable_strings_are_invalid_not_a_server_error(api, raw):
    response = api.post("/v1/control/start", raw=raw)
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
