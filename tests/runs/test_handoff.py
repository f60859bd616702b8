"""A start and an approval hand the run to a worker of this process in their own commit
(lease taken; a new run started, the gated call's attempt opened), under the dispatcher's
rules; a hand-off that waited past its lease is dropped, and the step still runs once."""

import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import Pause
from runs.domain.services import run_start, steering_submit
from runs.models import Event, Run, RunStatus, ToolCall
from runs.runtime import handoff, loop
from runs.runtime.dispatch import drain
from runs.runtime.planner import CallTool, Finish
from runs.runtime.registry import Agent, get_agent, register_agent, unregister_agent
from runs.runtime.tools import Tool

pytestmark = pytest.mark.django_db(transaction=True)


class _OneCall:
    def decide(self, view):
        return Finish("done") if view.history else CallTool("launch", {"target": "moon"})


def _approved(people) -> Run:
    alice = people.caller("alice")
    run, _ = run_start(caller=alice, query="launch", agent_id="probe")
    drain()
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED
    steering_submit(caller=alice, run_id=run.pk, method="approve", payload={})
    return Run.objects.get(pk=run.pk)


def test_an_approval_hands_the_run_on_with_the_attempt_opened(people_tx, probe):
    run = _approved(people_tx)
    assert run.status == RunStatus.RUNNING and run.lease_owner  # claimed by the approval's commit
    attempt = ToolCall.objects.get(run=run)
    assert (attempt.attempt, attempt.outcome, attempt.worker) == (1, "running", run.lease_owner)
    assert Event.objects.filter(run=run, type="tool.invoked").count() == 1
    assert probe.calls == []  # the body runs on the worker, after the commit
    assert drain() == 1
    run.refresh_from_db()
    assert (run.status, run.lease_owner) == (RunStatus.COMPLETE, "")
    assert probe.calls == [{"target": "moon"}]
    assert list(ToolCall.objects.filter(run=run).values_list("outcome", flat=True)) == ["completed"]


def test_a_drain_that_carries_the_last_ready_run_to_its_end_sends_no_look(people_tx, probe):
    """The transaction that ended the run asked, as it ended, whether another run was ready."""
    run = _approved(people_tx)
    with CaptureQueriesContext(connection) as queries:
        assert drain() == 1
    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETE
    assert not [q for q in queries.captured_queries if "AS candidate" in q["sql"]]


def test_a_run_left_ready_meanwhile_is_advanced_by_the_drain_that_carries_a_hand_off(people_tx, probe, settings):
    """The statement that ends the handed run says whether another run is ready: this one
    is, so the drain looks for it (a run made ready later wakes a worker of its own)."""
    alice = people_tx.caller("alice")
    handed, left = (run_start(caller=alice, query="launch", agent_id="probe")[0] for _ in range(2))
    drain()
    steering_submit(caller=alice, run_id=handed.pk, method="approve", payload={})
    settings.HARBOR_HANDOFF = False  # decided with no hand-off: left ready for a look
    steering_submit(caller=alice, run_id=left.pk, method="approve", payload={})
    assert Run.objects.get(pk=left.pk).lease_owner == ""
    assert drain() == 2
    assert set(Run.objects.filter(pk__in=[handed.pk, left.pk]).values_list("status", flat=True)) == {"complete"}
    assert probe.calls == [{"target": "moon"}] * 2


def test_a_start_hands_the_new_run_on_started_with_its_lease(people_tx, probe):
    run, _ = run_start(caller=people_tx.caller("alice"), query="launch", agent_id="probe")
    stored = Run.objects.get(pk=run.pk)
    assert stored.status == RunStatus.RUNNING and stored.lease_owner  # claimed by the start's commit
    assert stored.started_at is not None and stored.created_at <= stored.started_at
    assert list(Event.objects.filter(run=run).values_list("type", flat=True)) == ["task.spawned", "task.started"]
    assert drain() == 1  # the handed step: the planner asked, the gate parked
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED
    assert Event.objects.filter(run=run, type="task.started").count() == 1


def test_a_tenant_at_its_share_of_workers_leaves_the_started_run_to_a_look(people_tx, probe, settings):
    settings.HARBOR_TENANT_MAX_RUNNING = 1
    alice = people_tx.caller("alice")
    busy, _ = run_start(caller=alice, query="launch", agent_id="probe")  # holds acme's one worker
    run, _ = run_start(caller=alice, query="launch", agent_id="probe")
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.lease_owner) == (RunStatus.PENDING, "")
    assert list(Event.objects.filter(run=run).values_list("type", flat=True)) == ["task.spawned"]  # nothing else landed
    drain()  # the first one parks at its gate and lets its worker go; the look takes the second
    assert Run.objects.get(pk=busy.pk).status == Run.objects.get(pk=run.pk).status == RunStatus.PAUSED


@pytest.fixture
def waited(monkeypatch):
    """Hand-offs carried as if they waited for a worker: each reads the run first."""
    monkeypatch.setattr(handoff, "FRESH_SECONDS", 0.0)


@pytest.fixture
def at_once(monkeypatch):
    """Hand-offs carried at once, however slow the machine."""
    monkeypatch.setattr(handoff, "FRESH_SECONDS", 60.0)


def test_a_cancel_that_reaches_a_handed_start_that_waited_asks_no_planner(people_tx, probe, monkeypatch, waited):
    planner: Any = get_agent("probe").planner
    decide, asked = planner.decide, []

    def counted(self, view):
        asked.append(view.step)
        return decide(self, view)

    monkeypatch.setattr(planner, "decide", counted)
    run, _ = run_start(caller=people_tx.caller("alice"), query="launch", agent_id="probe")
    steering_submit(caller=people_tx.caller("alice"), run_id=run.pk, method="cancel", payload={})
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING  # the cancel waits for its boundary
    assert drain() == 1
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    assert asked == []  # a model may take minutes: it is not asked for a cancelled run


def test_a_tenant_at_its_share_of_workers_leaves_the_decided_run_to_a_look(people_tx, probe, settings):
    settings.HARBOR_TENANT_MAX_RUNNING = 1
    alice = people_tx.caller("alice")
    busy, _ = run_start(caller=alice, query="launch", agent_id="probe")
    drain()
    other, _ = run_start(caller=alice, query="launch", agent_id="probe")
    drain()
    Run.objects.filter(pk=busy.pk).update(
        lease_owner="elsewhere", lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    steering_submit(caller=alice, run_id=other.pk, method="approve", payload={})
    run = Run.objects.get(pk=other.pk)
    assert (run.status, run.lease_owner) == (RunStatus.RUNNING, "")  # not taken: acme holds its one worker
    assert not ToolCall.objects.filter(run=run).exists()
    assert drain() == 0  # the look keeps the same share
    Run.objects.filter(pk=busy.pk).update(lease_owner="", lease_expires_at=None)
    assert drain() == 1
    assert Run.objects.get(pk=other.pk).status == RunStatus.COMPLETE
    assert probe.calls == [{"target": "moon"}]


def test_a_cancel_that_reaches_a_handed_call_that_waited_keeps_it_from_running(people_tx, probe, waited):
    run = _approved(people_tx)
    steering_submit(caller=people_tx.caller("alice"), run_id=run.pk, method="cancel", payload={})
    assert drain() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert probe.calls == []  # the body never began
    attempt = ToolCall.objects.get(run=run)
    assert (attempt.outcome, attempt.error) == ("interrupted", "steering arrived before the call began")


def test_a_cancel_landing_just_after_the_approval_meets_the_handed_call_in_flight(people_tx, probe, at_once):
    """Carried at once, the call goes on from the approval's commit, where its attempt was
    opened: the cancel stops the run at the call's next boundary, its result recorded."""
    run = _approved(people_tx)
    steering_submit(caller=people_tx.caller("alice"), run_id=run.pk, method="cancel", payload={})
    assert drain() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert probe.calls == [{"target": "moon"}]  # once
    assert list(ToolCall.objects.filter(run=run).values_list("outcome", flat=True)) == ["completed"]
    assert run.checkpoint["history"][0]["result"] == {"launched": "moon"}
    types = list(Event.objects.filter(run=run).order_by("sequence").values_list("type", flat=True))
    assert types.index("tool.completed") < types.index("task.cancelled")


def test_a_cancel_landing_just_after_a_start_drops_the_planners_decision(people_tx, probe, at_once):
    """The handed start asks its planner, and the cancel that landed meanwhile is applied
    instead of the decision: the run ends cancelled, no call made."""
    run, _ = run_start(caller=people_tx.caller("alice"), query="launch", agent_id="probe")
    steering_submit(caller=people_tx.caller("alice"), run_id=run.pk, method="cancel", payload={})
    assert drain() == 1
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    assert not ToolCall.objects.filter(run=run).exists() and probe.calls == []
    assert not Pause.objects.filter(run=run).exists()


def test_a_handed_call_that_waited_renews_its_lease_before_it_begins(people_tx, waited):
    """A hand-off carried a third of a lease after its claim renews it first (a fresher one
    is only read: it holds for two thirds more, and the keeper renews it on time)."""
    held_until: list[object] = []

    def launch(args, ctx):
        held_until.append(Run.objects.get(pk=ctx.run_id).lease_expires_at)
        return {}

    register_agent(
        Agent(
            id="renewed",
            description="test",
            planner=_OneCall,
            tools={"launch": Tool("launch", launch, approval="always")},
        )
    )
    try:
        alice = people_tx.caller("alice")
        run, _ = run_start(caller=alice, query="launch", agent_id="renewed")
        drain()
        steering_submit(caller=alice, run_id=run.pk, method="approve", payload={})
        approved_until = Run.objects.get(pk=run.pk).lease_expires_at
        time.sleep(0.01)
        handoff._handed[0][0].written -= settings.HARBOR_LEASE_SECONDS / 3  # it waited for a worker
        assert drain() == 1
    finally:
        unregister_agent("renewed")
    assert approved_until is not None and len(held_until) == 1
    assert held_until[0] > approved_until  # type: ignore[operator]


def test_a_hand_off_whose_lease_lapsed_is_dropped_and_the_step_runs_once(people_tx, probe, waited):
    run = _approved(people_tx)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))  # lapsed
    assert drain() == 1  # the hand-off is dropped; the look claims the run and takes the step over
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert probe.calls == [{"target": "moon"}]
    outcomes = list(ToolCall.objects.filter(run=run).order_by("attempt").values_list("outcome", flat=True))
    assert outcomes == ["lost", "completed"]  # the handed attempt never ran its body


def test_a_process_whose_pool_is_not_running_hands_nothing_to_itself(people_tx, probe, settings):
    alice = people_tx.caller("alice")
    run, _ = run_start(caller=alice, query="launch", agent_id="probe")
    drain()
    settings.HARBOR_EXECUTOR = "thread"  # as a shell or a command: no pool threads here
    steering_submit(caller=alice, run_id=run.pk, method="approve", payload={})
    settings.HARBOR_EXECUTOR = "manual"
    assert Run.objects.get(pk=run.pk).lease_owner == ""  # left to a look
    assert drain() == 1
    assert probe.calls == [{"target": "moon"}]


def test_a_hand_off_that_crashes_leaves_the_decision_standing_and_the_run_to_a_worker(people_tx, probe, monkeypatch):
    alice = people_tx.caller("alice")
    run, _ = run_start(caller=alice, query="launch", agent_id="probe")
    drain()
    opened = loop.open_attempt

    def broken(*args, **kwargs):
        raise RuntimeError("a bug past the decision")

    monkeypatch.setattr(loop, "open_attempt", broken)
    receipt = steering_submit(caller=alice, run_id=run.pk, method="approve", payload={})
    assert not receipt.replayed
    assert Pause.objects.get(run=run).decision == "approve"
    assert (Run.objects.get(pk=run.pk).status, Run.objects.get(pk=run.pk).lease_owner) == (RunStatus.RUNNING, "")
    monkeypatch.setattr(loop, "open_attempt", opened)
    assert drain() == 1
    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETE
    assert probe.calls == [{"target": "moon"}]
