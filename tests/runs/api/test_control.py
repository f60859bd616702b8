"""PROTOCOL §2-§4 over HTTP: start, the nine methods, scopes, idempotency, synchronous
decisions. Every method has a happy path and a malformed request."""

import pytest

from approvals.models import DecisionRefusal, Pause
from runs.models import Event, Run, RunStatus, SteeringInstruction
from runs.runtime.dispatch import drain

from .conftest import mint


def _types(run: str) -> list[str]:
    return list(Event.objects.filter(run_id=run).order_by("sequence").values_list("type", flat=True))


def _parked_deploy(api, user="alice") -> tuple[str, str]:
    run = api.start("deploy build 42 to staging", "deploy", user=user)
    drain()
    snapshot = api.ok("/v1/pause/list", {"identity": {}, "filter": {"run_ids": [run]}}, user=user)["snapshots"][0]
    return run, snapshot["token"]


# --- start ------------------------------------------------------------------------------------


def test_start_answers_the_task_id_and_protocol_version(api):
    body = api.ok("/v1/control/start", {"identity": {}, "query": "count to 2", "agent_id": "countdown", "priority": -3})
    assert body == {"task_id": body["task_id"], "reused": False, "protocol_version": "0.1.0"}
    run = Run.objects.get(pk=body["task_id"])
    assert (run.owner.username, run.session, run.priority, run.status) == ("alice", "s1", -3, RunStatus.PENDING)


def test_start_defaults_to_the_deploy_agent_and_accepts_a_parent(api):
    parent = api.start()
    child = api.ok(
        "/v1/control/start",
        {"identity": {}, "query": "deploy build 1", "parent_run": parent, "cancel_policy": "isolate"},
    )
    run = Run.objects.get(pk=child["task_id"])
    assert (run.agent_id, run.parent_id, run.cancel_policy) == ("deploy", parent, "isolate")


def test_start_with_an_idempotency_key_is_reused_per_identity(api):
    body = {"identity": {}, "query": "q", "agent_id": "countdown", "idempotency_key": "k-1"}
    first = api.ok("/v1/control/start", body)
    again = api.ok("/v1/control/start", body)
    assert again == {**first, "reused": True}
    other_session = api.ok("/v1/control/start", body, session="s2")
    assert not other_session["reused"] and other_session["task_id"] != first["task_id"]
    assert Run.objects.count() == 2


@pytest.mark.parametrize(
    "body",
    [
        {"identity": {}},
        {"identity": {}, "query": ""},
        {"identity": {}, "query": 42},
        {"identity": {}, "query": "q", "agent_id": "nope"},
        {"identity": {}, "query": "q", "priority": "5"},
        {"identity": {}, "query": "q", "priority": True},
        {"identity": {}, "query": "q", "priority": 5000},
        {"identity": {}, "query": "q", "cancel_policy": "orphan"},
        {"identity": {}, "query": "q", "idempotency_key": ""},
        {"query": "q", "identity": "alice"},
    ],
)
def test_start_refuses_malformed_requests(api, body):
    api.error("/v1/control/start", body, status=400, code="invalid_request")
    assert not Run.objects.exists()


def test_start_with_an_unknown_or_foreign_parent_is_not_found(api):
    foreign = api.start(user="gina")
    api.error("/v1/control/start", {"identity": {}, "query": "q", "parent_run": foreign}, status=404, code="not_found")
    api.error("/v1/control/start", {"identity": {}, "query": "q", "parent_run": "01NOPE"}, status=404, code="not_found")


# --- the nine methods: happy paths ---------------------------------------------------------------


def test_cancel_a_queued_run_at_once(api):
    run = api.start()
    assert api.control("cancel", run, {"hard": True}).json() == {
        "accepted": True,
        "method": "cancel",
        "protocol_version": "0.1.0",
    }
    assert Run.objects.get(pk=run).status == RunStatus.CANCELLED


def test_pause_then_resume_an_operator_pause(api, settings):
    run = api.start("count to 3")
    assert api.control("pause", run).status_code == 200
    drain()
    assert Run.objects.get(pk=run).status == RunStatus.PAUSED
    pause = Pause.objects.get(run_id=run)
    assert pause.cause == "operator" and pause.reason == "await_input"
    assert api.control("resume", run, {}).status_code == 200
    drain()
    assert Run.objects.get(pk=run).status == RunStatus.COMPLETE
    assert "pause.resumed" in _types(run)


def test_approve_with_edited_args_runs_the_gated_call(api):
    run, token = _parked_deploy(api)
    edited = {"token": token, "reason": "ok", "args": {"environment": "production"}}
    assert api.control("approve", run, edited).json()["accepted"]
    drain()
    run_row = Run.objects.get(pk=run)
    assert run_row.status == RunStatus.COMPLETE and run_row.answer == "Deployed build 42 to production."
    invoked = Event.objects.get(run_id=run, type="tool.invoked", payload__Tool="deploy_to_production")
    assert invoked.payload["Args"] == {"build": "42", "environment": "production"}


@pytest.mark.parametrize(
    "edited, field, problem",
    [
        ({"environment": ""}, "environment", "must be one of staging, production"),
        ({"build": "not-a-build; rm -rf /"}, "build", "not a build name"),
        ({"build": "42", "region": "mars"}, "region", "is not an argument of this tool"),
    ],
)
def test_an_edit_the_tool_schema_refuses_decides_nothing(api, edited, field, problem):
    run, token = _parked_deploy(api)
    refused = api.error(
        "/v1/control/approve",
        {"identity": {"run": run}, "payload": {"token": token, "args": edited}},
        status=422,
        code="payload_invalid",
    )
    assert refused["fields"][field].startswith(problem) and f"{field}: {problem}" in refused["message"]
    assert Pause.objects.get(run_id=run).is_open and Run.objects.get(pk=run).status == RunStatus.PAUSED
    drain()
    assert not Event.objects.filter(run_id=run, type="tool.invoked", payload__Tool="deploy_to_production").exists()


def test_a_planner_call_the_tool_schema_refuses_fails_the_run_before_any_gate(api):
    run = api.start("deploy build 42 to the-moon", "deploy")
    drain()
    run_row = Run.objects.get(pk=run)
    assert run_row.status == RunStatus.FAILED and not Pause.objects.filter(run_id=run).exists()
    assert "environment: must be one of staging, production" in run_row.failure_message


def test_reject_ends_the_run_failed(api):
    run, token = _parked_deploy(api)
    assert api.control("reject", run, {"token": token, "reason": "not today"}).status_code == 200
    run_row = Run.objects.get(pk=run)
    assert (run_row.status, run_row.failure_code) == (RunStatus.FAILED, "constraints_conflict")
    assert "tool.rejected" in _types(run) and "tool.invoked" not in _types(run)[-3:]


def test_approve_without_a_token_targets_the_open_pause(api):
    run, _ = _parked_deploy(api)
    assert api.control("approve", run, {}).status_code == 200


@pytest.mark.parametrize(
    "method, payload, event",
    [
        ("redirect", {"goal": "count to 1 instead"}, "task.redirected"),
        ("inject_context", {"note": "prod is frozen"}, "context.injected"),
        ("user_message", {"message": "hurry"}, "message.received"),
    ],
)
def test_boundary_steering_applies_at_the_next_step(api, method, payload, event):
    run = api.start("count to 2")
    assert api.control(method, run, payload).status_code == 200
    assert SteeringInstruction.objects.get(run_id=run).state == "pending"
    drain()
    assert event in _types(run)
    assert SteeringInstruction.objects.get(run_id=run).state == "applied"


def test_prioritize_needs_admin_and_applies_at_once(api):
    run = api.start()
    api.error(
        "/v1/control/prioritize",
        {"identity": {"run": run}, "payload": {"priority": 9}},
        status=403,
        code="scope_mismatch",
    )
    assert api.control("prioritize", run, {"priority": 9}, user="ada").status_code == 200
    assert Run.objects.get(pk=run).priority == 9
    assert "task.prioritised" in _types(run)


# --- the nine methods: malformed requests -----------------------------------------------------


@pytest.mark.parametrize(
    "method, body",
    [
        ("pause", {"identity": {}}),
        ("cancel", {"identity": {"run": "R"}, "event_id": ""}),
        ("cancel", {"identity": {"run": "R", "scope": "root"}}),
        ("cancel", {"identity": {"run": 12}}),
        ("redirect", {"payload": {"goal": "go"}}),
        ("prioritize", {"identity": {"run": "R"}, "payload": {"priority": "high"}, "event_id": 5}),
    ],
)
def test_malformed_controls_are_invalid_requests_and_change_nothing(api, method, body):
    """A body that is not the method's shape at all: 400 invalid_request (PROTOCOL §3)."""
    run = api.start()
    body = {**body, "identity": {k: (run if v == "R" else v) for k, v in body.get("identity", {}).items()}}
    before = SteeringInstruction.objects.count(), Run.objects.get(pk=run).status
    api.error(f"/v1/control/{method}", body, status=400, code="invalid_request")
    assert (SteeringInstruction.objects.count(), Run.objects.get(pk=run).status) == before


@pytest.mark.parametrize(
    "method, payload",
    [
        ("cancel", {"hard": "yes"}),
        ("resume", {"token": 7}),
        ("resume", {"token": ""}),
        ("approve", {"args": [1]}),
        ("approve", {"reason": 5}),
        ("approve", {"input": "yes"}),
        ("reject", {"args": {"build": "99"}}),
        ("reject", {"input": "no"}),
        ("resume", {"args": {}}),
        ("reject", "no"),
        ("reject", ["no"]),
        ("redirect", {"goal": ""}),
        ("redirect", {}),
        ("redirect", None),  # no payload at all: a redirect without a goal
        ("inject_context", {}),
        ("inject_context", None),
        ("user_message", {"message": "   "}),
        ("user_message", {"message": ["hi"]}),
        ("prioritize", {"priority": "high"}),
        ("prioritize", {"priority": 1.5}),
        ("prioritize", {"priority": True}),
        ("prioritize", {"priority": 10**6}),
        ("prioritize", {}),
        ("prioritize", None),
    ],
)
def test_a_payload_that_breaks_its_methods_rules_is_422_payload_invalid(api, method, payload):
    """The body has the method's shape; its payload breaks the method's rules (PROTOCOL §3)."""
    run = api.start()
    body = {"identity": {"run": run}, **({} if payload is None else {"payload": payload})}
    before = SteeringInstruction.objects.count(), Run.objects.get(pk=run).status
    api.error(f"/v1/control/{method}", body, user="ada", scopes=["admin"], status=422, code="payload_invalid")
    assert (SteeringInstruction.objects.count(), Run.objects.get(pk=run).status) == before


def test_an_unknown_method_is_404_unknown_method(api):
    run = api.start()
    for name in ("explode", "START", "approve2", "x" * 300):
        api.error(f"/v1/control/{name}", {"identity": {"run": run}}, status=404, code="unknown_method")


# --- scopes, tenants, terminal runs -----------------------------------------------------------


def test_another_tenants_run_is_not_found_for_every_method(api):
    run = api.start(user="gina")
    for method in (
        "cancel",
        "pause",
        "resume",
        "approve",
        "reject",
        "redirect",
        "inject_context",
        "user_message",
        "prioritize",
    ):
        payload = {
            "redirect": {"goal": "g"},
            "inject_context": {"a": 1},
            "user_message": {"message": "m"},
            "prioritize": {"priority": 1},
        }.get(method, {})
        api.error(
            f"/v1/control/{method}",
            {"identity": {"run": run}, "payload": payload},
            user="ada",
            scopes=["admin"],
            status=404,
            code="not_found",
        )
    assert not SteeringInstruction.objects.exists()


def test_an_unknown_or_terminal_run_is_not_found(api):
    api.error("/v1/control/cancel", {"identity": {"run": "01UNKNOWN"}}, status=404, code="not_found")
    run = api.start()
    api.control("cancel", run)
    api.error(
        "/v1/control/redirect", {"identity": {"run": run}, "payload": {"goal": "g"}}, status=404, code="not_found"
    )


def test_below_the_minimum_scope_is_scope_mismatch(api):
    run = api.start()
    # bob (approver) sees alice's run but holds no steering scope on it.
    api.error(
        "/v1/control/redirect",
        {"identity": {"run": run}, "payload": {"goal": "g"}},
        user="bob",
        status=403,
        code="scope_mismatch",
    )
    # the owner from another session holds owner_user, so session_user methods are fine.
    assert api.control("user_message", run, {"message": "hi"}, session="s2").status_code == 200
    assert list(SteeringInstruction.objects.filter(run_id=run).values_list("instruction", "actor_session")) == [
        ("user_message", "s2")
    ]


def test_a_requested_scope_the_caller_lacks_is_identity_scope_required(api):
    run = api.start()
    api.error(
        "/v1/control/cancel", {"identity": {"run": run, "scope": "admin"}}, status=403, code="identity_scope_required"
    )
    assert Run.objects.get(pk=run).status == RunStatus.PENDING  # the refused cancel changed nothing
    assert api.control("cancel", run, identity={"scope": "owner_user"}).status_code == 200
    assert Run.objects.get(pk=run).status == RunStatus.CANCELLED


def test_an_operator_steers_as_if_owner(api):
    run = api.start()
    assert api.control("redirect", run, {"goal": "new goal"}, user="olivia").status_code == 200
    drain()
    assert Run.objects.get(pk=run).goal == "new goal"
    assert SteeringInstruction.objects.get(run_id=run).actor.username == "olivia"


# --- idempotent controls ---------------------------------------------------------------------


def test_a_control_event_id_is_applied_once_and_acknowledged_again(api):
    run = api.start()
    first = api.control("user_message", run, {"message": "once"}, event_id="e-1")
    again = api.control("user_message", run, {"message": "once"}, event_id="e-1")
    assert first.json() == again.json() == {"accepted": True, "method": "user_message", "protocol_version": "0.1.0"}
    assert SteeringInstruction.objects.filter(run_id=run).count() == 1


def test_an_approve_replayed_by_event_id_is_acknowledged_not_refused(api):
    run, token = _parked_deploy(api)
    assert api.control("approve", run, {"token": token}, event_id="d-1").status_code == 200
    assert api.control("approve", run, {"token": token}, event_id="d-1").status_code == 200
    assert Pause.objects.get(run_id=run).decision == "approve"


# --- synchronous decisions ---------------------------------------------------------------------


def test_a_second_approve_is_409_already_resumed(api):
    run, token = _parked_deploy(api)
    assert api.control("approve", run, {"token": token}).status_code == 200
    body = api.error(
        "/v1/control/approve",
        {"identity": {"run": run}, "payload": {"token": token}},
        status=409,
        code="already_resumed",
    )
    assert "resumed" in body["message"]


def test_a_viewer_who_may_not_decide_gets_403_and_the_refusal_is_audited(api):
    run, token = _parked_deploy(api)
    # olivia (operator) sees the run but may not decide approval gates; owner_user by role.
    api.error(
        "/v1/control/approve",
        {"identity": {"run": run}, "payload": {"token": token}},
        user="olivia",
        status=403,
        code="scope_mismatch",
    )
    # the owner from another session holds owner_user but is not the pausing session.
    api.error(
        "/v1/control/approve",
        {"identity": {"run": run}, "payload": {"token": token}},
        session="s2",
        status=403,
        code="scope_mismatch",
    )
    assert DecisionRefusal.objects.filter(code="scope_mismatch").count() == 2
    assert Pause.objects.get(run_id=run).is_open


def test_a_delegated_approver_decides_synchronously(api):
    run, _ = _parked_deploy(api)
    assert api.control("approve", run, {}, user="bob").status_code == 200
    pause = Pause.objects.get(run_id=run)
    assert pause.decided_by is not None
    assert (pause.decided_by.username, pause.on_behalf_of) == ("bob", "acme/alice/s1")


def test_a_wrong_or_foreign_token_is_not_found(api):
    run, _ = _parked_deploy(api)
    _, foreign = _parked_deploy(api, user="gina")
    for token in ("hrbp_guess", foreign):
        api.error(
            "/v1/control/approve", {"identity": {"run": run}, "payload": {"token": token}}, status=404, code="not_found"
        )
    assert Pause.objects.get(run_id=run).is_open


def test_repeated_refused_decisions_are_rate_limited(api, settings):
    settings.HARBOR_REFUSALS_PER_IDENTITY = 3
    run, token = _parked_deploy(api)
    for n in range(3):
        api.error(
            "/v1/control/approve",
            {"identity": {"run": run}, "payload": {"token": f"hrbp_guess{n}"}},
            status=404,
            code="not_found",
        )
    response = api.post("/v1/control/approve", {"identity": {"run": run}, "payload": {"token": token}})
    assert (response.status_code, response.json()["code"]) == (429, "rate_limited")
    assert int(response["Retry-After"]) > 0
    # even the right token is held back, from any session of that identity...
    api.error(
        "/v1/control/approve",
        {"identity": {"run": run}, "payload": {"token": token}},
        session="s9",
        status=429,
        code="rate_limited",
    )
    # ...while other identities and non-decision controls are unaffected.
    assert api.control("user_message", run, {"message": "still here"}).status_code == 200
    assert api.control("approve", run, {}, user="bob").status_code == 200


def test_refusals_are_also_limited_per_address(api, settings):
    settings.HARBOR_REFUSALS_PER_ADDRESS = 2
    run, _ = _parked_deploy(api)
    for user in ("alice", "olivia"):  # two identities that may steer the run, one address
        api.error(
            "/v1/control/approve",
            {"identity": {"run": run}, "payload": {"token": "hrbp_x"}},
            user=user,
            status=404,
            code="not_found",
        )
    api.error(
        "/v1/control/approve", {"identity": {"run": run}, "payload": {}}, user="ada", status=429, code="rate_limited"
    )


def test_token_expiry_claims_are_not_extendable_by_the_session_header(api):
    api.error(
        "/v1/control/start",
        {"identity": {}, "query": "q"},
        token=mint("alice", ttl=-120),
        headers={"X-Harbor-Session": "s"},
        status=401,
        code="auth_rejected",
    )


# --- refusals before the decision rule, wrong kinds, reused ids ---------------------------------


def test_a_token_on_a_run_the_caller_may_not_see_or_steer_is_refused_audited_and_throttled(api, settings):
    """PROTOCOL §4: a token presented by another tenant, user or session is refused and
    audited, also when the run itself already stops the caller."""
    settings.HARBOR_REFUSALS_PER_IDENTITY = 3
    run, token = _parked_deploy(api)
    decide = {"identity": {"run": run}, "payload": {"token": token}}
    for _ in range(3):
        api.error("/v1/control/approve", decide, user="gina", status=404, code="not_found")
    api.error("/v1/control/approve", decide, user="gina", status=429, code="rate_limited")
    assert (
        list(DecisionRefusal.objects.values_list("actor_tenant", "actor_user", "code"))
        == [("globex", "gina", "not_found")] * 3
    )
    assert Pause.objects.get(run_id=run).is_open

    paused = api.start("count to 3")
    api.control("pause", paused)
    drain()
    operator_token = api.ok("/v1/pause/list", {"filter": {"run_ids": [paused]}})["snapshots"][0]["token"]
    # bob approves gates by role; an operator's pause is the owner's to resume
    resume = {"identity": {"run": paused}, "payload": {"token": operator_token}}
    api.error("/v1/control/resume", resume, user="bob", status=403, code="scope_mismatch")
    refusal = DecisionRefusal.objects.get(actor_user="bob")
    assert (refusal.code, refusal.pause_id) == ("scope_mismatch", Pause.objects.get(run_id=paused).pk)


def test_a_decision_for_another_kind_of_pause_is_not_found_and_changes_nothing(api):
    gated, _ = _parked_deploy(api)
    api.error("/v1/control/resume", {"identity": {"run": gated}, "payload": {}}, status=404, code="not_found")
    paused = api.start("count to 3")
    api.control("pause", paused)
    drain()
    for method in ("approve", "reject"):
        api.error(f"/v1/control/{method}", {"identity": {"run": paused}, "payload": {}}, status=404, code="not_found")
    assert Pause.objects.get(run_id=gated).is_open and Pause.objects.get(run_id=paused).is_open
    assert Run.objects.get(pk=paused).status == RunStatus.PAUSED


def test_a_pause_sent_to_a_gated_run_parks_it_once_the_gate_is_approved(api):
    run, token = _parked_deploy(api)
    completed = _types(run).count("tool.completed")
    assert api.control("pause", run).status_code == 200
    assert api.control("pause", run).status_code == 200  # queued twice, it parks once
    assert api.control("approve", run, {"token": token}).status_code == 200
    drain()
    assert Run.objects.get(pk=run).status == RunStatus.PAUSED
    assert Pause.objects.filter(run_id=run, state="paused").get().cause == "operator"
    assert _types(run).count("tool.completed") == completed  # the approved call waits for the operator
    assert api.control("pause", run).status_code == 200  # an operator's pause holds it already
    assert api.control("resume", run, {}).status_code == 200
    drain()
    run_row = Run.objects.get(pk=run)
    assert run_row.status == RunStatus.COMPLETE and run_row.answer == "Deployed build 42 to staging."
    assert _types(run).count("tool.completed") == completed + 1


def test_an_event_id_used_for_another_control_is_refused_not_taken_for_the_first(api):
    run = api.start("count to 3")
    assert api.control("inject_context", run, {"note": "x"}, event_id="ev-1").status_code == 200
    for method, payload in (("cancel", {"hard": True}), ("inject_context", {"note": "y"})):
        response = api.control(method, run, payload, event_id="ev-1")
        assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
        assert "ev-1" in response.json()["message"]
    assert SteeringInstruction.objects.filter(run_id=run).count() == 1
    run_row = Run.objects.get(pk=run)
    assert run_row.status != RunStatus.CANCELLED and not run_row.hard_cancel


def test_an_edited_argument_keeps_its_type(api):
    run, token = _parked_deploy(api)
    for edited in ({"environment": {"x": 1}}, {"environment": 5}, {"environment": None}):
        api.error(
            "/v1/control/approve",
            {"identity": {"run": run}, "payload": {"token": token, "args": edited}},
            status=422,
            code="payload_invalid",
        )
    assert Pause.objects.get(run_id=run).is_open


def test_steering_waiting_on_a_run_that_ends_is_rejected_and_narrated(api):
    run, token = _parked_deploy(api)
    assert api.control("redirect", run, {"goal": "elsewhere"}).status_code == 200
    assert api.control("reject", run, {"token": token}).status_code == 200
    redirect, reject = SteeringInstruction.objects.filter(run_id=run).order_by("pk")
    assert (redirect.state, redirect.outcome) == ("rejected", "the run is failed")
    assert reject.state == "applied" and reject.created_at == reject.settled_at
    rejected = Event.objects.filter(run_id=run, type="control.rejected").get()
    assert rejected.payload["Type"] == "REDIRECT" and rejected.payload["Err"] == "the run is failed"
    assert not Run.objects.get(pk=run).steering_pending


def test_a_decision_refused_as_not_found_is_narrated_on_a_run_the_caller_sees(api):
    """PROTOCOL §4: the stream narrates control.received then control.rejected for every
    refusal on a run the caller can see, a wrong token's 404 included; not on a run it
    cannot see (another tenant's: nothing of it is revealed, nor written)."""
    run, _ = _parked_deploy(api)
    api.error(
        "/v1/control/approve",
        {"identity": {"run": run}, "payload": {"token": "hrbp_wrong"}},
        status=404,
        code="not_found",
    )
    narrated = list(Event.objects.filter(run_id=run, type__startswith="control.").values_list("type", "payload"))
    assert [kind for kind, _ in narrated] == ["control.received", "control.rejected"]
    assert narrated[1][1]["Err"] == "not_found"
    api.error("/v1/control/cancel", {"identity": {"run": run}}, status=404, code="not_found", user="gina")
    assert Event.objects.filter(run_id=run, type__startswith="control.").count() == 2
