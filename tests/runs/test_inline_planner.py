"""A planner of rules is decided inline, in the transaction of the step before it (a new
run's first step, in the transaction that starts it): the same run, the same events in the
same order, two commits fewer per pause + decide cycle."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.domain.services import run_start, steering_submit
from runs.models import Event, FailureCode, Run, RunStatus, ToolCall
from runs.runtime.dispatch import drain
from runs.runtime.planner import CallTool, Finish, PlannerView
from runs.runtime.registry import Agent, register_agent, unregister_agent
from runs.runtime.tools import Tool
from tests.conftest import GatedProbe


def cycle(people) -> tuple[Run, int]:
    """One pause + decide cycle of the probe: the run, and the transactions it committed."""
    alice = people.caller("alice")
    with CaptureQueriesContext(connection) as queries:
        run, _ = run_start(caller=alice, query="launch", agent_id="probe")
        drain()
        steering_submit(caller=alice, run_id=run.pk, method="approve", payload={})
        drain()
    run.refresh_from_db()
    return run, sum(1 for q in queries.captured_queries if q["sql"] == "COMMIT")


def story(run: Run) -> list[str]:
    return list(Event.objects.filter(run=run).order_by("sequence").values_list("type", flat=True))


@pytest.mark.django_db(transaction=True)
def test_an_inline_planner_tells_the_same_story_in_two_commits_fewer(people_tx):
    runs = {}
    for inline in (False, True):
        probe = GatedProbe(inline=inline)
        try:
            runs[inline] = (*cycle(people_tx), probe.calls)
        finally:
            unregister_agent("probe")
    (asked_between, commits_between, calls_between), (decided_inline, commits, calls) = runs[False], runs[True]
    assert decided_inline.status == asked_between.status == RunStatus.COMPLETE
    assert decided_inline.answer == asked_between.answer == "launched moon"
    assert calls == calls_between == [{"target": "moon"}]  # the gated body ran once
    assert story(decided_inline) == story(asked_between)
    assert (commits_between, commits) == (5, 3)  # the start and the approval hand the run on in their own commits


class _Broken:
    def decide(self, view: PlannerView):
        raise ValueError("no rule for this")


@pytest.fixture
def broken_inline():
    yield register_agent(Agent(id="broken", description="test", planner=_Broken, tools={}, planner_inline=True))
    unregister_agent("broken")


def test_an_inline_planner_that_raises_fails_the_run_once(people, broken_inline):
    run, _ = run_start(caller=people.caller("alice"), query="go", agent_id="broken")
    assert run.status == RunStatus.FAILED  # at its first step, in the start's transaction
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.failure_code == FailureCode.RUNTIME_ERROR
    assert "ValueError: no rule for this" in run.failure_message
    assert run.lease_owner == ""  # released with the failure: nothing left to claim
    assert drain() == 0


@pytest.fixture
def probe_inline():
    yield GatedProbe(inline=True)
    unregister_agent("probe")


def test_a_first_step_parks_the_run_before_start_returns(people, probe_inline):
    run, _ = run_start(caller=people.caller("alice"), query="launch", agent_id="probe")
    assert run.status == RunStatus.PAUSED
    assert run.pauses.get().tool == "launch"
    assert story(run) == [
        "task.spawned",
        "task.started",
        "planner.decision",
        "pause.requested",
        "tool.approval_requested",
        "notification.pause_requested",
    ]
    assert drain() == 0  # nothing for a worker: no lease was ever taken


class _Fetcher:
    def decide(self, view: PlannerView):
        return Finish(view.history[-1]["result"]) if view.history else CallTool("fetch", {"n": 1})


@pytest.fixture
def fetcher():
    calls: list[dict] = []

    def fetch(args, ctx):
        calls.append(dict(args))
        return "fetched"

    tool = Tool("fetch", fetch)
    register_agent(
        Agent(id="fetcher", description="test", planner=_Fetcher, tools={"fetch": tool}, planner_inline=True)
    )
    yield calls
    unregister_agent("fetcher")


def test_a_first_step_leaves_a_call_to_the_worker_that_claims_the_run(people, fetcher):
    run, _ = run_start(caller=people.caller("alice"), query="go", agent_id="fetcher")
    assert run.status == RunStatus.RUNNING and run.lease_owner == ""  # ready for any worker
    assert run.checkpoint["pending_call"] == {"tool": "fetch", "args": {"n": 1}, "step": 0, "attempts": 0}
    assert not ToolCall.objects.filter(run=run).exists()  # the attempt is the worker's to open
    assert drain() == 1
    run.refresh_from_db()
    assert (run.status, run.answer) == (RunStatus.COMPLETE, "fetched")
    assert fetcher == [{"n": 1}]
    assert list(ToolCall.objects.filter(run=run).values_list("attempt", "outcome")) == [(1, "completed")]
    assert story(run)[:4] == ["task.spawned", "task.started", "planner.decision", "tool.invoked"]


def _broken_policy(args: dict) -> bool:
    raise KeyError("no such rule")


@pytest.fixture
def broken_policy():
    tool = Tool("fetch", lambda args, ctx: "fetched", approval=_broken_policy)
    register_agent(Agent(id="policy", description="test", planner=_Fetcher, tools={"fetch": tool}, planner_inline=True))
    yield
    unregister_agent("policy")


def test_a_first_step_that_crashes_leaves_the_start_standing(people, broken_policy):
    """A bug past the planner (here a tool's approval rule) does not fail the start: the
    run is left pending, and the worker that claims it fails it loudly, as it would any step."""
    run, _ = run_start(caller=people.caller("alice"), query="go", agent_id="policy")
    assert run.status == RunStatus.PENDING
    assert story(run) == ["task.spawned"]  # nothing of the crashed step was kept
    assert drain() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "KeyError" in run.failure_message
