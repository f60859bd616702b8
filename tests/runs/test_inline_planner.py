"""A planner of rules is decided inline, in the transaction of the step before it: the same
run, the same events in the same order, two commits fewer per pause + decide cycle."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.domain.services import run_start, steering_submit
from runs.models import Event, FailureCode, Run, RunStatus
from runs.runtime.dispatch import drain
from runs.runtime.planner import PlannerView
from runs.runtime.registry import Agent, register_agent, unregister_agent
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
    assert (commits_between, commits) == (7, 5)


class _Broken:
    def decide(self, view: PlannerView):
        raise ValueError("no rule for this")


@pytest.fixture
def broken_inline():
    yield register_agent(Agent(id="broken", description="test", planner=_Broken, tools={}, planner_inline=True))
    unregister_agent("broken")


def test_an_inline_planner_that_raises_fails_the_run_once(people, broken_inline):
    run, _ = run_start(caller=people.caller("alice"), query="go", agent_id="broken")
    assert drain() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.failure_code == FailureCode.RUNTIME_ERROR
    assert "ValueError: no rule for this" in run.failure_message
    assert run.lease_owner == ""  # released with the failure: nothing left to claim
    assert drain() == 0
