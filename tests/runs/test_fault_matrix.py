"""The fault matrix: at every transaction boundary of a run's life (start, claim, dispatch,
record, decide, cancel, steering applied at a boundary, the sweep) the database connection
is lost before, during and after the commit, really (its backend terminated), and the system
goes on. What is asserted is the ledger and the audit, not just the run's last status: each
tool body ran exactly once, its step's ledger is one completed attempt with one
`tool.invoked`, each decision was recorded once, every tenant's event sequences are gap-free
and increasing, and a request that met one loss was answered as applied, never a 500."""

from datetime import timedelta

import pytest
from django.db import OperationalError

from approvals.models import Decision, Pause, PauseState
from runs import tasks
from runs.application import run_start, steering_submit
from runs.kernel.errors import AlreadyResumed
from runs.models import Event, Run, RunStatus, SteeringInstruction, Tenant, ToolCall
from runs.runtime.dispatch import drain
from runs.runtime.planner import CallTool, Finish
from runs.runtime.registry import Agent, register_agent, unregister_agent
from runs.runtime.tools import Tool
from tests.conftest import requires_postgres
from tests.dropped_connections import WHENS, LoseConnection, When
from tests.runs.api.conftest import TRUSTED_PEM, Api

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]

BOTH_STEPS = [(0, 1, "completed"), (1, 1, "completed")]
CHECKED = [(0, 1, "completed")]


class Bodies:
    """Agent `matrix`: step 0 calls `check`, step 1 the gated `launch` (its gate expires
    after `deadline`, if given); then it finishes. Counts each body's real executions."""

    def __init__(self, deadline: timedelta | None = None) -> None:
        self.ran: dict[str, int] = {"check": 0, "launch": 0}
        bodies = self

        def body(name):
            def run(args, ctx):
                bodies.ran[name] += 1
                return {"ran": name}

            return run

        class Planner:
            def decide(self, view):
                done = [entry["tool"] for entry in view.history if "tool" in entry]
                if "check" not in done:
                    return CallTool("check", {})
                if "launch" not in done:
                    return CallTool("launch", {"target": "moon"})
                return Finish("launched")

        register_agent(
            Agent(
                id="matrix",
                description="test",
                planner=Planner,
                tools={
                    "check": Tool("check", body("check")),
                    "launch": Tool("launch", body("launch"), approval="always", deadline=deadline),
                },
            )
        )


@pytest.fixture
def bodies():
    yield Bodies()
    unregister_agent("matrix")


@pytest.fixture
def expiring_bodies():
    yield Bodies(deadline=timedelta(milliseconds=1))
    unregister_agent("matrix")


@pytest.fixture
def api(people_tx, settings) -> Api:
    settings.HARBOR_JWT_PUBLIC_KEYS = TRUSTED_PEM
    settings.HARBOR_JWT_DEV_KEYS = False
    return Api()


def go_on() -> int:
    """The workers carry on until nothing is ready, as Celery's dispatch task does (a look
    that meets a lost connection looks once more on a new one): the steps taken."""
    return tasks.dispatch()


def start(people, **kwargs) -> Run:
    return run_start(caller=people.caller("alice"), query="launch", agent_id="matrix", **kwargs)[0]


def at_the_gate(people) -> Run:
    """A run whose `check` ran, parked at the gate of `launch`."""
    run = start(people)
    go_on()
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED
    return run


def between_steps(people) -> Run:
    """A running run whose `check` ran, queued for its next step."""
    run = start(people)
    assert drain(limit=1) == 1
    run.refresh_from_db()
    assert (run.status, run.lease_owner) == (RunStatus.RUNNING, "")
    return run


def approve(people, run: Run) -> None:
    steering_submit(caller=people.caller("bob"), run_id=run.pk, method="approve")


def ledger(run: Run) -> list[tuple[int, int, str]]:
    return list(ToolCall.objects.filter(run=run).order_by("step", "attempt").values_list("step", "attempt", "outcome"))


def events(run: Run, type: str) -> list[Event]:
    return list(Event.objects.filter(run=run, type=type).order_by("pk"))


def assert_the_audit_holds(run: Run) -> None:
    """What every cell asserts: one `tool.invoked` per attempt in the ledger (none for an
    attempt that never was), no decision twice, and every tenant's sequences gap-free and
    increasing in the order the events were written."""
    invoked = [(e.payload["Step"], e.payload["Attempt"]) for e in events(run, "tool.invoked")]
    assert invoked == [(step, attempt) for step, attempt, _ in ledger(run)]
    pauses = Pause.objects.filter(run=run)
    decided = pauses.exclude(state=PauseState.PAUSED).count()
    assert len(events(run, "pause.resumed")) == decided
    assert len(events(run, "pause.requested")) == pauses.count()
    assert len(events(run, "task.spawned")) == 1
    assert len(events(run, "task.started")) == 1
    for tenant in Tenant.objects.all():
        sequences = list(Event.objects.filter(tenant=tenant).order_by("pk").values_list("sequence", flat=True))
        assert sequences == list(range(1, len(sequences) + 1)), tenant.slug
        assert tenant.event_sequence == len(sequences)


def assert_launched_once(run: Run, bodies: Bodies) -> None:
    run.refresh_from_db()
    assert (run.status, run.answer) == (RunStatus.COMPLETE, "launched")
    assert bodies.ran == {"check": 1, "launch": 1}
    assert ledger(run) == BOTH_STEPS
    assert list(Pause.objects.filter(run=run).values_list("decision", flat=True)) == [Decision.APPROVE]
    assert SteeringInstruction.objects.filter(run=run, instruction="approve").count() == 1
    assert_the_audit_holds(run)


def struck(fault: LoseConnection, statement: str) -> None:
    """The fault struck the commit it was aimed at."""
    assert fault.struck is not None, "the fault never struck"
    assert any(sql.startswith(statement) for sql in fault.struck), fault.struck


# --- start ------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", WHENS)
def test_a_start_sent_again_with_its_key_after_a_lost_connection_starts_one_run(people_tx, bodies, when: When):
    fault = LoseConnection(when, wrote='INSERT INTO "runs_run"')
    with fault.armed():
        try:
            run = start(people_tx, idempotency_key="k-1")
        except OperationalError:  # its answer never came: the caller sends it again, as keys allow
            assert when != "after"
            run = start(people_tx, idempotency_key="k-1")
        go_on()
    struck(fault, 'INSERT INTO "runs_run"')
    assert list(Run.objects.values_list("pk", flat=True)) == [run.pk]
    approve(people_tx, run)
    go_on()
    assert_launched_once(run, bodies)


@pytest.mark.parametrize("key", [None, "k-1"], ids=["no-key", "key"])
@pytest.mark.parametrize("when", WHENS)
def test_an_http_start_whose_connection_is_lost_answers_the_one_run_it_made(api, people_tx, bodies, when, key):
    body = {"query": "launch", "agent_id": "matrix", **({"idempotency_key": key} if key else {})}
    fault = LoseConnection(when, wrote='INSERT INTO "runs_run"')
    with fault.armed():
        started = api.ok("/v1/control/start", body)
        go_on()
    struck(fault, 'INSERT INTO "runs_run"')
    assert started["reused"] is False
    run = Run.objects.get()
    assert run.pk == started["task_id"]
    approve(people_tx, run)
    go_on()
    assert_launched_once(run, bodies)


# --- the worker's transactions ----------------------------------------------------------------


@pytest.mark.parametrize("when", WHENS)
def test_a_claim_whose_connection_is_lost_takes_the_step_once(people_tx, bodies, when: When):
    run = start(people_tx)
    fault = LoseConnection(when, wrote='UPDATE "runs_run"')
    with fault.armed():
        steps = go_on()
    struck(fault, 'UPDATE "runs_run" SET "lease_owner"')
    assert steps == 2  # its worker went on with the step it claimed: `check`'s, then the gate's
    approve(people_tx, run)
    go_on()
    assert_launched_once(run, bodies)


@pytest.mark.parametrize("when", WHENS)
def test_a_dispatch_whose_connection_is_lost_runs_its_body_once(people_tx, bodies, when: When):
    """The planner's call is persisted and its attempt opened: landed, the body runs on
    the attempt it opened; not landed, the dispatch is made again."""
    run = start(people_tx)
    fault = LoseConnection(when, wrote='INSERT INTO "runs_toolcall"')
    with fault.armed():
        go_on()
    struck(fault, 'INSERT INTO "runs_toolcall"')
    assert (bodies.ran, ledger(run)) == ({"check": 1, "launch": 0}, CHECKED)
    approve(people_tx, run)
    go_on()
    assert_launched_once(run, bodies)


@pytest.mark.parametrize("when", WHENS)
def test_an_approved_call_whose_opening_is_lost_runs_once(people_tx, bodies, when: When):
    """The approved call's attempt is opened by the step's boundary, not by a dispatch."""
    run = at_the_gate(people_tx)
    approve(people_tx, run)
    fault = LoseConnection(when, wrote='INSERT INTO "runs_toolcall"')
    with fault.armed():
        go_on()
    struck(fault, 'INSERT INTO "runs_toolcall"')
    assert_launched_once(run, bodies)


@pytest.mark.parametrize("when", WHENS)
def test_a_record_whose_connection_is_lost_settles_its_attempt_once(people_tx, bodies, when: When):
    run = start(people_tx)
    fault = LoseConnection(when, wrote='UPDATE "runs_toolcall"')
    with fault.armed():
        go_on()
    struck(fault, 'UPDATE "runs_toolcall"')
    assert (bodies.ran, ledger(run)) == ({"check": 1, "launch": 0}, CHECKED)
    assert len(events(run, "tool.completed")) == 1
    approve(people_tx, run)
    go_on()
    assert_launched_once(run, bodies)


# --- decisions --------------------------------------------------------------------------------


@pytest.mark.parametrize("event_id", [None, "approve-1"], ids=["no-event-id", "event-id"])
@pytest.mark.parametrize("when", WHENS)
def test_a_decision_sent_again_after_a_lost_connection_is_recorded_once(people_tx, bodies, when, event_id):
    """The service's caller sends it again: with its event_id it is answered as the first
    (applied or replayed); without, a decision that had landed is refused as already made."""
    run = at_the_gate(people_tx)
    bob = people_tx.caller("bob")

    def decide():
        return steering_submit(caller=bob, run_id=run.pk, method="approve", event_id=event_id)

    fault = LoseConnection(when, wrote='UPDATE "approvals_pause"')
    with fault.armed():
        try:
            decide()
        except OperationalError:
            assert when != "after"
            try:
                receipt = decide()
                assert receipt.replayed == (when == "during")
            except AlreadyResumed:
                assert (when, event_id) == ("during", None)
        go_on()
    struck(fault, 'UPDATE "approvals_pause"')
    assert_launched_once(run, bodies)


@pytest.mark.parametrize("event_id", [None, "decide-1"], ids=["no-event-id", "event-id"])
@pytest.mark.parametrize("method", ["approve", "reject"])
@pytest.mark.parametrize("when", WHENS)
def test_a_decision_over_http_whose_connection_is_lost_is_answered_200_and_recorded_once(
    api, people_tx, bodies, when, method, event_id
):
    run = at_the_gate(people_tx)
    body = {"identity": {"run": run.pk}, "payload": {}, **({"event_id": event_id} if event_id else {})}
    fault = LoseConnection(when, wrote='UPDATE "approvals_pause"')
    with fault.armed():
        answer = api.post(f"/v1/control/{method}", body, user="bob")
        go_on()
    struck(fault, 'UPDATE "approvals_pause"')
    assert (answer.status_code, answer.json()["method"]) == (200, method)
    if event_id:  # sent again with its event_id: answered as the first, applied once
        assert api.ok(f"/v1/control/{method}", body, user="bob")["method"] == method
    if method == "approve":
        assert_launched_once(run, bodies)
        return
    run.refresh_from_db()
    assert (run.status, bodies.ran, ledger(run)) == (RunStatus.FAILED, {"check": 1, "launch": 0}, CHECKED)
    assert list(Pause.objects.filter(run=run).values_list("decision", flat=True)) == [Decision.REJECT]
    assert SteeringInstruction.objects.filter(run=run, instruction="reject").count() == 1
    assert_the_audit_holds(run)


# --- cancels and steering at a boundary ---------------------------------------------------------


@pytest.mark.parametrize("state", ["parked", "running"])
@pytest.mark.parametrize("when", WHENS)
def test_a_cancel_whose_connection_is_lost_is_answered_200_and_cancels_once(api, people_tx, bodies, when, state):
    """A parked run is cancelled in the request; a running one at its next boundary."""
    run = at_the_gate(people_tx) if state == "parked" else between_steps(people_tx)
    fault = LoseConnection(when, wrote='INSERT INTO "runs_steeringinstruction"')
    with fault.armed():
        answer = api.post("/v1/control/cancel", {"identity": {"run": run.pk}, "payload": {}})
        go_on()
    struck(fault, 'INSERT INTO "runs_steeringinstruction"')
    assert (answer.status_code, answer.json()["method"]) == (200, "cancel")
    run.refresh_from_db()
    assert (run.status, bodies.ran, ledger(run)) == (RunStatus.CANCELLED, {"check": 1, "launch": 0}, CHECKED)
    assert list(SteeringInstruction.objects.filter(run=run).values_list("instruction", "state")) == [
        ("cancel", "applied")
    ]
    assert len(events(run, "task.cancelled")) == 1
    assert [e.payload["Type"] for e in events(run, "control.applied")] == ["CANCEL"]
    assert_the_audit_holds(run)


@pytest.mark.parametrize("method", ["inject_context", "cancel"])
@pytest.mark.parametrize("when", WHENS)
def test_steering_applied_at_a_boundary_whose_connection_is_lost_applies_once(people_tx, bodies, when, method):
    run = between_steps(people_tx)
    payload = {"note": "mind the weather"} if method == "inject_context" else {}
    steering_submit(caller=people_tx.caller("alice"), run_id=run.pk, method=method, payload=payload)
    fault = LoseConnection(when, wrote='UPDATE "runs_steeringinstruction"')
    with fault.armed():
        go_on()
    struck(fault, 'UPDATE "runs_steeringinstruction"')
    assert list(SteeringInstruction.objects.filter(run=run).values_list("instruction", "state")) == [
        (method, "applied")
    ]
    assert [e.payload["Type"] for e in events(run, "control.applied")] == [method.upper()]
    if method == "cancel":
        run.refresh_from_db()
        assert (run.status, bodies.ran, ledger(run)) == (RunStatus.CANCELLED, {"check": 1, "launch": 0}, CHECKED)
        assert_the_audit_holds(run)
        return
    assert Run.objects.get(pk=run.pk).context == [payload]
    assert len(events(run, "context.injected")) == 1
    approve(people_tx, run)
    go_on()
    assert_launched_once(run, bodies)


# --- the sweep --------------------------------------------------------------------------------


@pytest.mark.parametrize("when", WHENS)
def test_a_sweep_whose_connection_is_lost_expires_the_pause_once(people_tx, expiring_bodies, when: When):
    run = at_the_gate(people_tx)
    fault = LoseConnection(when, wrote='UPDATE "approvals_pause"')
    with fault.armed():
        tasks.sweep()  # Celery's beat: a sweep that meets a lost connection sweeps once more
        go_on()
    struck(fault, 'UPDATE "approvals_pause"')
    run.refresh_from_db()
    assert (run.status, expiring_bodies.ran, ledger(run)) == (RunStatus.FAILED, {"check": 1, "launch": 0}, CHECKED)
    assert list(Pause.objects.filter(run=run).values_list("decision", flat=True)) == [Decision.TIMEOUT]
    assert len(events(run, "task.failed")) == 1
    assert_the_audit_holds(run)


# --- the reported bug -------------------------------------------------------------------------


@pytest.fixture
def deployed(monkeypatch):
    """The demo `deploy` agent's deploy_to_production, its real executions counted."""
    from runs.runtime.registry import get_agent

    agent = get_agent("deploy")
    tool = agent.tools["deploy_to_production"]
    ran: list[dict] = []

    def counted(args, ctx):
        ran.append(dict(args))
        return tool.run(args, ctx)

    monkeypatch.setitem(agent.tools, "deploy_to_production", Tool(**{**vars(tool), "run": counted}))
    return ran


def test_an_approved_deploy_to_production_whose_dispatch_answer_is_lost_runs_once(api, people_tx, deployed):
    run = api.start("deploy build 42 to production", "deploy")
    go_on()
    assert Run.objects.get(pk=run).status == RunStatus.PAUSED
    api.ok("/v1/control/approve", {"identity": {"run": run}, "payload": {}}, user="bob")
    fault = LoseConnection("during", wrote='INSERT INTO "runs_toolcall"')
    with fault.armed():
        go_on()
    struck(fault, 'INSERT INTO "runs_toolcall"')
    finished = Run.objects.get(pk=run)
    assert (finished.status, finished.answer) == (RunStatus.COMPLETE, "Deployed build 42 to production.")
    assert deployed == [{"build": "42", "environment": "production"}]
    assert ledger(finished) == [(0, 1, "completed"), (1, 1, "completed")]
    assert_the_audit_holds(finished)


@pytest.fixture
def steered_while_thinking(people_tx):
    """Agent `thinking`: while its planner first thinks, context is injected; each call it
    makes carries how much context its planner had seen."""
    seen: list[int] = []

    class Planner:
        def decide(self, view):
            seen.append(len(view.context))
            if len(seen) == 1:
                run_id = view.run_id
                steering_submit(
                    caller=people_tx.caller("alice"), run_id=run_id, method="inject_context", payload={"hint": "h"}
                )
            return Finish("done") if view.history else CallTool("work", {"seen": len(view.context)})

    register_agent(
        Agent(id="thinking", description="test", planner=Planner, tools={"work": Tool("work", lambda a, c: a)})
    )
    yield seen
    unregister_agent("thinking")


@pytest.mark.parametrize("when", WHENS)
def test_steering_applied_by_a_dispatch_whose_connection_is_lost_is_seen_by_the_planner_before_it_calls(
    people_tx, steered_while_thinking, when: When
):
    """The dispatch met steering that arrived while the planner thought: it applied it and
    asks the planner again. Made again after a lost answer, it must not act on the answer
    given before the steering, as if the steering had not been applied."""
    run = run_start(caller=people_tx.caller("alice"), query="think", agent_id="thinking")[0]
    fault = LoseConnection(when, wrote='UPDATE "runs_steeringinstruction"')
    with fault.armed():
        go_on()
    struck(fault, 'UPDATE "runs_steeringinstruction"')
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert [entry["args"] for entry in run.checkpoint["history"]] == [{"seen": 1}]
    assert steered_while_thinking == [0, 1, 1]
    assert len(events(run, "context.injected")) == 1
    assert_the_audit_holds(run)
