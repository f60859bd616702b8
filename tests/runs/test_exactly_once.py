"""Exactly once under real timing: leases outlive slow tools, fenced workers record nothing,
approvals survive parks, cascades and starts race cleanly, handles never leak. The ledger
(runs.ToolCall) is what each test reads to prove a step's body ran once."""

import contextlib
import os
import socket
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.domain.services import pause_sweep_overdue
from approvals.models import Cause, Decision, Pause
from runs.application import run_start, steering_submit
from runs.domain import handles
from runs.kernel.errors import AlreadyResumed, HarborError, NotFound
from runs.models import Event, Run, RunStatus, ToolCall
from runs.runtime.dispatch import drain
from runs.runtime.lease import Lease
from runs.runtime.planner import CallTool, Finish
from runs.runtime.registry import Agent, register_agent, unregister_agent
from runs.runtime.tools import Tool
from tests.approvals.test_races import in_threads
from tests.conftest import requires_postgres


def start(people, query, agent, who="alice", **kwargs) -> Run:
    return run_start(caller=people.caller(who), query=query, agent_id=agent, **kwargs)[0]


def steer(people, run, method, payload=None, who="alice"):
    return steering_submit(caller=people.caller(who), run_id=run.pk, method=method, payload=payload)


def ledger(run) -> list[tuple[int, int, str]]:
    return list(ToolCall.objects.filter(run=run).order_by("step", "attempt").values_list("step", "attempt", "outcome"))


class SlowTool:
    """Agent `slow`: one call of `work`, which sleeps, checks the fence, then performs its
    side effect (appended to `effects` with the worker's attempt)."""

    def __init__(self, seconds: float) -> None:
        self.bodies: list[str] = []
        self.effects: list[str] = []
        slow = self

        def work(args, ctx):
            slow.bodies.append(ctx.idempotency_key)
            ctx.sleep(seconds)
            ctx.fence()
            slow.effects.append(ctx.idempotency_key)
            return {"done": True}

        class Planner:
            def decide(self, view):
                return Finish("done") if view.history else CallTool("work", {})

        register_agent(Agent(id="slow", description="test", planner=Planner, tools={"work": Tool("work", work)}))


@pytest.fixture
def slow():
    yield SlowTool
    unregister_agent("slow")


def keep_draining(seconds: float) -> None:
    """Another worker (or the sweeper) looking for work the whole time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        drain()
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_a_tool_longer_than_its_lease_runs_once(people_tx, slow, settings):
    settings.HARBOR_LEASE_SECONDS = 1
    tool = slow(2.5)
    run = start(people_tx, "work slowly", "slow")

    def worker(i: int) -> None:
        if i == 0:
            drain()
        else:
            time.sleep(0.2)
            keep_draining(3.5)

    in_threads(2, worker)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert tool.bodies == [f"{run.pk}:0"] and tool.effects == [f"{run.pk}:0"]
    assert ledger(run) == [(0, 1, "completed")]
    assert list(Event.objects.filter(run=run, type="tool.invoked").values_list("payload__Attempt", flat=True)) == [1]


@pytest.mark.django_db(transaction=True)
def test_a_lease_partly_spent_before_the_slow_work_is_renewed_in_time(people_tx, slow, settings):
    """The steps before a tool (the claim, the planner, the dispatch) took most of the lease:
    the keeper renews a third after the lease was written, not a third after the tool began
    (which would fall after the lease expired)."""
    settings.HARBOR_LEASE_SECONDS = 1
    slow(0)
    run = start(people_tx, "work slowly", "slow")
    lease = Lease(run.pk, "worker-a")
    assert lease.claim()
    time.sleep(0.75)  # past a third of the lease; a third from now is past its end
    with lease.heartbeat():
        time.sleep(0.6)
    lease.fence()  # still held: renewed at once, then every third
    assert not lease.lost.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_lost_its_lease_is_fenced_from_side_effects_and_records(people_tx, slow, settings, monkeypatch):
    """The first worker's heartbeat stalls (a long pause, a partition): its lease expires and
    a second worker takes the step over. The first one wakes up to a fence."""
    settings.HARBOR_LEASE_SECONDS = 1
    tool = slow(1.6)
    beating = Lease.heartbeat
    stalled: list[str] = []

    def heartbeat(self):
        stalled[:] = stalled or [self.worker]
        return contextlib.nullcontext() if self.worker == stalled[0] else beating(self)

    monkeypatch.setattr(Lease, "heartbeat", heartbeat)
    run = start(people_tx, "work slowly", "slow")

    def worker(i: int) -> None:
        if i == 1:
            time.sleep(1.3)
        drain()

    in_threads(2, worker)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert len(tool.bodies) == 2 and tool.effects == [f"{run.pk}:0"]  # the stalled worker never got past the fence
    assert ledger(run) == [(0, 1, "lost"), (0, 2, "completed")]
    calls = ToolCall.objects.filter(run=run).order_by("attempt")
    assert calls[0].worker == stalled[0] != calls[1].worker
    assert calls[0].idempotency_key == calls[1].idempotency_key == f"{run.pk}:0"
    assert Event.objects.filter(run=run, type="tool.completed").count() == 1


def test_an_approval_survives_an_operator_pause_before_the_call_runs(people, probe):
    run = start(people, "launch", "probe")
    drain()
    steer(people, run, "approve", who="bob")
    steer(people, run, "pause", who="olivia")  # lands before any worker picks the run up
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and probe.calls == []
    assert Pause.objects.filter(run=run, state="paused").get().cause == Cause.OPERATOR
    steer(people, run, "resume", who="olivia")
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and probe.calls == [{"target": "moon"}]
    assert list(Pause.objects.filter(run=run).order_by("created_at").values_list("cause", flat=True)) == [
        Cause.HITL_APPROVAL,
        Cause.OPERATOR,
    ]  # the gate opened once
    assert ledger(run) == [(0, 1, "completed")]


@pytest.mark.django_db(transaction=True)
def test_an_operator_pause_waiting_at_a_gate_parks_the_run_its_approval_hands_on(people_tx, probe):
    """The pause waits for the gate to open; the approved run's next step applies it first: the
    run parks with no lease, the approved call not begun."""
    run = start(people_tx, "launch", "probe")
    drain()
    steer(people_tx, run, "pause", who="olivia")  # waits: the run is parked at its gate
    steer(people_tx, run, "approve", who="bob")
    assert drain() == 1  # the boundary meets the pause
    run.refresh_from_db()
    assert (run.status, run.lease_owner, run.steering_pending) == (RunStatus.PAUSED, "", False)
    assert Pause.objects.filter(run=run, state="paused").get().cause == Cause.OPERATOR
    drain()
    assert probe.calls == []
    steer(people_tx, run, "resume", who="olivia")
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and probe.calls == [{"target": "moon"}]
    assert ledger(run) == [(0, 1, "completed")]


def test_edited_arguments_travel_with_the_approval(people, probe):
    run = start(people, "launch", "probe")
    drain()
    steer(people, run, "approve", {"args": {"target": "mars"}}, who="bob")
    steer(people, run, "pause", who="olivia")
    drain()
    steer(people, run, "resume", who="olivia")
    drain()
    assert probe.calls == [{"target": "mars"}]


def open_sockets() -> int:
    return sum(
        os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    )


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_parked_run_releases_its_live_handles(people_tx):
    people = people_tx
    sockets = open_sockets()
    run = start(people, "hold a stream", "tool_context")
    drain()
    keys = Pause.objects.get(run=run).handle_keys.values()
    assert open_sockets() == sockets + 2 and all(handles.lookup(k) for k in keys)  # held while parked
    steer(people, run, "cancel")
    assert open_sockets() == sockets
    assert not any(handles.lookup(key) for key in keys)


@pytest.fixture
def leaky():
    """Agent `leaky`: opens a socket pair as live handles, then its next tool fails."""

    def open_pair(args, ctx):
        for name, end in zip(("near", "far"), socket.socketpair()):
            ctx.attach(name, end)
        return {}

    def explode(args, ctx):
        raise RuntimeError("boom")

    class Planner:
        def decide(self, view):
            return CallTool("explode" if view.history else "open_pair", {})

    register_agent(
        Agent(
            id="leaky",
            description="test",
            planner=Planner,
            tools={"open_pair": Tool("open_pair", open_pair), "explode": Tool("explode", explode)},
        )
    )
    yield
    unregister_agent("leaky")


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_releases_its_live_handles(people_tx, leaky):
    sockets = open_sockets()
    run = start(people_tx, "leak", "leaky")
    drain()
    run.refresh_from_db()
    assert (run.status, run.failure_message) == (RunStatus.FAILED, "explode: RuntimeError: boom")
    assert open_sockets() == sockets
    assert ledger(run) == [(0, 1, "completed"), (1, 1, "failed")]


# --- Races on PostgreSQL (real threads, real row locks) -----------------------------------------


def race(test):
    return requires_postgres(pytest.mark.postgres(pytest.mark.django_db(transaction=True)(test)))


@race
@pytest.mark.parametrize("attempt", range(3))
def test_race_operator_pause_against_dispatch_after_an_approval(people_tx, probe, attempt):
    run = start(people_tx, "launch", "probe")
    drain()
    steer(people_tx, run, "approve", who="bob")
    results = in_threads(2, lambda i: steer(people_tx, run, "pause", who="olivia") if i else drain())
    assert not [r for r in results if isinstance(r, Exception) and not isinstance(r, HarborError)], results
    if Run.objects.get(pk=run.pk).status == RunStatus.PAUSED:
        steer(people_tx, run, "resume", who="olivia")
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and probe.calls == [{"target": "moon"}]
    assert Pause.objects.filter(run=run, cause=Cause.HITL_APPROVAL).count() == 1
    # The body ran once. The approval handed the call on with its attempt opened; a pause
    # that reached it before the body began settled that attempt unrun, and the resume ran
    # the call as the step's next attempt.
    assert ledger(run) in ([(0, 1, "completed")], [(0, 1, "interrupted"), (0, 2, "completed")])


@race
@pytest.mark.parametrize("attempt", range(3))
def test_race_cancel_against_approve(people_tx, probe, attempt):
    run = start(people_tx, "launch", "probe")
    drain()
    results = in_threads(
        2, lambda i: steer(people_tx, run, "cancel") if i else steer(people_tx, run, "approve", who="bob")
    )
    assert all(
        r is not None and not isinstance(r, Exception) or isinstance(r, (AlreadyResumed, NotFound)) for r in results
    ), results
    drain()
    run.refresh_from_db()
    pause = Pause.objects.get(run=run)
    assert pause.decision in (Decision.APPROVE, Decision.CANCEL)
    assert run.status == RunStatus.CANCELLED  # a cancel always wins in the end: at once, or at the boundary
    # The gated body never ran. An approval that landed first handed the call on with its
    # attempt opened; the cancel reached it before the body began, so it was settled unrun.
    assert probe.calls == [] and ledger(run) in ([], [(0, 1, "interrupted")])


@race
@pytest.mark.parametrize("attempt", range(3))
def test_race_timeout_sweep_against_approve(people_tx, expiring_probe, attempt):
    run = start(people_tx, "launch", "probe")
    drain()
    later = timezone.now() + timedelta(hours=1)
    results = in_threads(
        2, lambda i: pause_sweep_overdue(now=later) if i else steer(people_tx, run, "approve", who="bob")
    )
    assert all(not isinstance(r, Exception) or isinstance(r, AlreadyResumed) for r in results), results
    drain()
    run.refresh_from_db()
    pause = Pause.objects.get(run=run)
    if pause.decision == Decision.TIMEOUT:
        assert (run.status, expiring_probe.calls) == (RunStatus.FAILED, [])
    else:
        assert pause.decision == Decision.APPROVE
        assert (run.status, expiring_probe.calls) == (RunStatus.COMPLETE, [{"target": "moon"}])


@race
def test_race_concurrent_starts_with_one_idempotency_key(people_tx):
    callers = [people_tx.caller("alice") for _ in range(10)]
    results = in_threads(
        10, lambda i: run_start(caller=callers[i], query="count to 1", agent_id="countdown", idempotency_key="same-key")
    )
    assert not [r for r in results if isinstance(r, Exception)], results
    assert len({run.pk for run, _ in results}) == 1 and [reused for _, reused in results].count(False) == 1
    assert Run.objects.count() == 1


@race
@pytest.mark.parametrize("attempt", range(3))
def test_race_cancel_against_a_child_completing(people_tx, attempt):
    parent = start(people_tx, "deploy build 1 to production", "deploy")
    drain()  # parked on its gate
    children = [start(people_tx, "count to 2", "countdown", parent_run=parent.pk) for _ in range(3)]
    results = in_threads(3, lambda i: steer(people_tx, parent, "cancel") if i == 0 else drain())
    assert not [r for r in results if isinstance(r, Exception)], results
    drain()
    assert Run.objects.get(pk=parent.pk).status == RunStatus.CANCELLED
    for child in children:
        child.refresh_from_db()
        assert child.status in (RunStatus.COMPLETE, RunStatus.CANCELLED)
        assert child.failure_code == ""  # no run died of a lock error


@race
def test_race_start_child_against_cancel_parent_leaves_no_live_orphan(people_tx):
    parent = start(people_tx, "deploy build 1 to production", "deploy")
    drain()

    def job(i):
        if i == 0:
            return steer(people_tx, parent, "cancel")
        return start(people_tx, "count to 1", "countdown", parent_run=parent.pk)

    results = in_threads(6, job)
    assert all(not isinstance(r, Exception) or isinstance(r, NotFound) for r in results), results
    # A child started before the cancel reached it went to this process's worker with its
    # lease: the cascade left the cancel to its first boundary, which applies it at once.
    drain()
    live = Run.objects.filter(parent=parent).exclude(status=RunStatus.CANCELLED)
    assert not live.exists(), list(live.values("pk", "status"))


@race
def test_race_cascading_cancels_and_busy_children_never_deadlock(people_tx):
    parents = [start(people_tx, "deploy build 1 to production", "deploy") for _ in range(3)]
    drain()
    children = [start(people_tx, "count to 30", "countdown", parent_run=p.pk) for p in parents for _ in range(2)]

    def job(i):
        if i < 3:
            time.sleep(0.1 * (i + 1))
            return steer(people_tx, parents[i], "cancel")
        return drain()

    results = in_threads(6, job)
    assert not [r for r in results if isinstance(r, Exception)], results
    drain()
    failed = Run.objects.filter(status=RunStatus.FAILED).values_list("failure_message", flat=True)
    assert not failed, list(failed)
    assert {Run.objects.get(pk=c.pk).status for c in children} <= {RunStatus.CANCELLED, RunStatus.COMPLETE}


@pytest.mark.django_db(transaction=True)
def test_a_busy_tenant_leaves_workers_for_the_others(people_tx, slow, settings):
    settings.HARBOR_TENANT_MAX_RUNNING = 1
    slow(1.0)
    first = start(people_tx, "work slowly", "slow")
    second = start(people_tx, "work slowly", "slow")
    other = start(people_tx, "count to 1", "countdown", who="gina")

    def worker(i):
        time.sleep(0.3 * i)  # the first worker takes acme's oldest run's step; the second comes later
        return drain(limit=1)

    in_threads(2, worker)
    runs = {r.pk: r for r in Run.objects.all()}
    assert runs[first.pk].status == runs[other.pk].status == RunStatus.RUNNING  # one step each
    assert runs[second.pk].status == RunStatus.PENDING  # acme was at its cap of one: globex went first


@pytest.mark.django_db(transaction=True)
def test_planners_and_tools_run_outside_any_transaction(people_tx):
    """A slow planner or tool must hold no row lock (no run, no tenant event cursor)."""
    from django.db import connection

    seen: list[tuple[str, bool]] = []

    def work(args, ctx):
        seen.append(("tool", connection.in_atomic_block))
        return {}

    class Planner:
        def decide(self, view):
            seen.append(("planner", connection.in_atomic_block))
            return Finish("done") if view.history else CallTool("work", {})

    register_agent(Agent(id="watched", description="test", planner=Planner, tools={"work": Tool("work", work)}))
    try:
        run = start(people_tx, "watch", "watched")
        drain()
    finally:
        unregister_agent("watched")
    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETE
    assert seen == [("planner", False), ("tool", False), ("planner", False)]


def test_a_tool_that_signals_a_pause_goes_on_with_the_answer(people):
    """A tool raises ToolPause (a remote agent's question): the run parks on the one pause;
    the resume's input reaches the same call, run as a new attempt of the same step."""
    from runs.runtime.tools import ToolPause

    def ask(args, ctx):
        if ctx.resumed is None:
            raise ToolPause(
                cause=Cause.A2A,
                reason="await_input",
                payload={"Question": "Which date?"},
                companion="a2a.input_required",
                summary="the travel desk asks",
            )
        return {"date": ctx.resumed["input"]}

    class Planner:
        def decide(self, view):
            return Finish(view.history[-1]["result"]["date"]) if view.history else CallTool("ask", {})

    register_agent(Agent(id="asker", description="test", planner=Planner, tools={"ask": Tool("ask", ask)}))
    try:
        run = start(people, "fly", "asker")
        drain()
        pause = Pause.objects.get(run=run)
        assert (Run.objects.get(pk=run.pk).status, pause.cause, pause.tool) == (RunStatus.PAUSED, Cause.A2A, "ask")
        assert Event.objects.filter(run=run, type="a2a.input_required").exists()
        steer(people, run, "resume", {"input": "March 3"})
        drain()
    finally:
        unregister_agent("asker")
    run.refresh_from_db()
    assert (run.status, run.answer) == (RunStatus.COMPLETE, "March 3")
    assert ledger(run) == [(0, 1, "paused"), (0, 2, "completed")]
