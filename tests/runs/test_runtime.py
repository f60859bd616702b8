"""The run loop: steering at step boundaries, operator pauses, cancel, priority, the
tool-context split, checkpoints and leases."""

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from approvals.models import Cause, Decision, Pause
from runs.application import run_start, steering_submit
from runs.kernel.errors import ScopeMismatch
from runs.models import Event, Run, RunStatus, SteeringState, ToolCall
from runs.runtime.dispatch import drain
from runs.runtime.loop import advance
from runs.runtime.planner import CallTool, Finish
from runs.runtime.registry import Agent, register_agent, unregister_agent
from runs.runtime.tools import Tool


def start(people, query="count to 3", agent="countdown", who="alice", **kwargs) -> Run:
    return run_start(caller=people.caller(who), query=query, agent_id=agent, **kwargs)[0]


def steer(people, run, method, payload=None, who="alice"):
    return steering_submit(caller=people.caller(who), run_id=run.pk, method=method, payload=payload)


def types(run) -> list[str]:
    return list(Event.objects.filter(run=run).values_list("type", flat=True))


class Scripted:
    """A test agent `scripted` that runs `work` n times; `during(step, ctx)` runs inside
    each step's tool body (to act while a step is in flight)."""

    def __init__(self, steps: int = 2, during=None) -> None:
        self.goals_seen: list[str] = []
        self.calls: list[int] = []
        scripted = self

        def work(args, ctx):
            scripted.calls.append(args["n"])
            if during:
                during(args["n"], ctx)
            return {"n": args["n"]}

        class Planner:
            def decide(self, view):
                scripted.goals_seen.append(view.goal)
                if len(view.history) < steps:
                    return CallTool("work", {"n": len(view.history) + 1})
                return Finish("done")

        register_agent(Agent(id="scripted", description="test", planner=Planner, tools={"work": Tool("work", work)}))


@pytest.fixture
def scripted():
    yield Scripted
    unregister_agent("scripted")


def test_countdown_sees_redirect_context_and_messages_in_its_answer(people):
    run = start(people)
    steer(people, run, "redirect", {"goal": "count to 3, loudly"})
    steer(people, run, "inject_context", {"ticket": "OPS-7"})
    steer(people, run, "user_message", {"message": "hurry up"})
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert "Counted to 3." in run.answer and "count to 3, loudly" in run.answer
    assert "OPS-7" in run.answer and "hurry up" in run.answer
    assert types(run).count("tool.completed") == 3


def test_steering_is_applied_only_at_step_boundaries(people, scripted):
    def during(n, ctx):
        if n == 1:
            steer(people, run, "redirect", {"goal": "new goal"})
            assert Run.objects.get(pk=run.pk).goal == "old goal"  # not mid-step

    agent = scripted(steps=2, during=during)
    run = start(people, "old goal", "scripted")
    drain()
    assert agent.goals_seen == ["old goal", "new goal", "new goal"]
    sequence = types(run)
    assert sequence.index("task.redirected") > sequence.index("tool.completed")


def test_an_operator_pauses_and_resumes_a_run_at_a_boundary(people):
    run = start(people)
    steer(people, run, "pause", who="olivia")
    drain()
    run.refresh_from_db()
    pause = Pause.objects.get(run=run)
    assert run.status == RunStatus.PAUSED and (pause.cause, pause.reason) == (Cause.OPERATOR, "await_input")
    again = steer(people, run, "pause", who="olivia")  # the operator's pause holds it already
    assert again.instruction.state == SteeringState.APPLIED
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and not run.steering_pending
    assert list(Pause.objects.filter(run=run).values_list("pk", flat=True)) == [pause.pk]
    steer(people, run, "inject_context", {"note": "while parked"})
    steer(people, run, "resume", who="olivia")
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and "while parked" in run.answer
    pause.refresh_from_db()
    assert pause.decided_by is not None
    assert (pause.decision, pause.decided_by.username) == (Decision.RESUME, "olivia")


def test_cancel_of_a_queued_or_parked_run_terminates_it_at_once(people):
    queued = start(people)
    steer(people, queued, "cancel")
    queued.refresh_from_db()
    assert queued.status == RunStatus.CANCELLED

    parked = start(people, "deploy build 1 to production", "deploy")
    drain()
    steer(people, parked, "cancel")
    parked.refresh_from_db()
    assert parked.status == RunStatus.CANCELLED
    assert Pause.objects.get(run=parked).decision == Decision.CANCEL


def test_a_soft_cancel_lets_the_step_in_flight_finish(people, scripted):
    run: Run  # started below; the agent's step cancels it
    agent = scripted(steps=3, during=lambda n, ctx: n == 1 and steer(people, run, "cancel"))
    run = start(people, "work", "scripted")
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and agent.calls == [1]
    assert run.checkpoint["step"] == 1  # the step in flight completed and was recorded


def test_a_hard_cancel_interrupts_the_step_in_flight(people, scripted):
    def during(n, ctx):
        steer(people, run, "cancel", {"hard": True})
        ctx.sleep(5)  # interrupted within ~0.1 s

    scripted(steps=3, during=during)
    run = start(people, "work", "scripted")
    began = timezone.now()
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.checkpoint["step"] == 0
    assert timezone.now() - began < timedelta(seconds=3)


def test_cancel_cascades_to_children_unless_they_isolate(people):
    parent = start(people, "deploy build 1 to production", "deploy")
    child = start(people, parent_run=parent.pk)
    grandchild = start(people, parent_run=child.pk)
    isolated = start(people, parent_run=parent.pk, cancel_policy="isolate")
    steer(people, parent, "cancel")
    statuses = {r.pk: r.status for r in Run.objects.all()}
    assert statuses[parent.pk] == statuses[child.pk] == statuses[grandchild.pk] == RunStatus.CANCELLED
    assert statuses[isolated.pk] == RunStatus.PENDING
    cascaded = Event.objects.get(run=child, type="task.cancelled").payload
    assert cascaded["Cascaded"] is True


def test_prioritize_changes_dispatch_order_and_needs_admin(people):
    first, second, third = (start(people, f"count to 1 #{i}") for i in range(3))
    with pytest.raises(ScopeMismatch):
        steer(people, third, "prioritize", {"priority": 10})
    steer(people, third, "prioritize", {"priority": 10}, who="ada")
    assert drain(limit=2) == 2  # its tick, then its finish: it goes first at each step
    assert [Run.objects.get(pk=r.pk).status for r in (first, second, third)] == [
        RunStatus.PENDING,
        RunStatus.PENDING,
        RunStatus.COMPLETE,
    ]
    assert Event.objects.get(run=third, type="task.prioritised").payload == {
        "TaskID": third.pk,
        "PriorPriority": 0,
        "NewPriority": 10,
    }


def test_a_live_handle_resumes_in_the_same_process(people):
    run = start(people, "hold a stream", "tool_context")
    drain()
    pause = Pause.objects.get(run=run)
    assert set(pause.handle_keys) == {"stream", "stream_peer"} and pause.tool_context == {"cursor": 0}
    steer(people, run, "resume")
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and "'resumed'" in run.answer


def test_a_value_neither_serializable_nor_registered_fails_the_pause(people):
    run = start(people, "hold an unregistered stream", "tool_context")
    drain()
    run.refresh_from_db()
    assert (run.status, run.failure_code) == (RunStatus.FAILED, "runtime_error")
    assert "ErrUnserializable" in run.failure_message and "'stream'" in run.failure_message
    assert not Pause.objects.filter(run=run).exists()


@pytest.mark.django_db(transaction=True)
def test_a_resume_in_another_process_fails_loudly_naming_the_handle(people_tx):
    people = people_tx
    run = start(people, "hold a stream", "tool_context")
    drain()
    steer(people, run, "resume")
    worker = subprocess.run(
        [sys.executable, "manage.py", "harbor_worker", "--until-idle"],
        env=_worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr
    run.refresh_from_db()
    assert (run.status, run.failure_code) == (RunStatus.FAILED, "tool_context_lost")
    assert "ErrToolContextLost" in run.failure_message and "'stream" in run.failure_message
    assert Event.objects.get(run=run, type="task.failed").payload["Code"] == "tool_context_lost"


def _worker_env() -> dict:
    """A second process on this test session's database."""
    env = dict(os.environ, HARBOR_EXECUTOR="manual")
    name = connection.settings_dict["NAME"]
    if connection.vendor == "sqlite":
        env["HARBOR_SQLITE_PATH"] = name
    else:
        env["DATABASE_URL"] = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + f"/{name}"
    return env


def test_a_completed_step_never_runs_again_after_a_worker_dies(people, scripted):
    class WorkerDied(BaseException):
        pass

    def during(n, ctx):
        if n == 2 and agent.calls.count(2) == 1:
            raise WorkerDied()

    agent = scripted(steps=3, during=during)
    run = start(people, "work", "scripted")
    with pytest.raises(WorkerDied):
        drain()
    # The worker died mid-step 2 holding its lease.
    Run.objects.filter(pk=run.pk).update(lease_owner="dead", lease_expires_at=timezone.now() + timedelta(seconds=30))
    assert drain() == 0  # a live lease keeps everyone else out
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert drain() == 3  # an expired lease means its worker died: recover (steps 2, 3 and the finish)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert agent.calls == [1, 2, 2, 3]  # step 1 completed once; only the step in flight re-ran


@pytest.mark.parametrize("count_kept", [True, False])
def test_the_attempt_after_a_dead_worker_is_numbered_after_its_own(people, scripted, count_kept):
    """The pending call keeps the count of its attempts in the checkpoint; one checkpointed
    before it kept any (count_kept=False) is numbered from the ledger instead."""

    class WorkerDied(BaseException):
        pass

    def during(n, ctx):
        if agent.calls == [1]:
            raise WorkerDied()

    agent = scripted(steps=1, during=during)
    run = start(people, "work", "scripted")
    with pytest.raises(WorkerDied):
        drain()
    run.refresh_from_db()
    assert run.checkpoint["pending_call"]["attempts"] == 1
    if not count_kept:
        del run.checkpoint["pending_call"]["attempts"]
    Run.objects.filter(pk=run.pk).update(
        checkpoint=run.checkpoint, lease_owner="dead", lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert drain() == 2  # the call again, then the finish
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and agent.calls == [1, 1]
    ledger = ToolCall.objects.filter(run=run).order_by("attempt").values_list("step", "attempt", "outcome")
    assert list(ledger) == [(0, 1, "lost"), (0, 2, "completed")]
    invoked = Event.objects.filter(run=run, type="tool.invoked").order_by("sequence")
    assert [event.payload["Attempt"] for event in invoked] == [1, 2]


@pytest.mark.parametrize("method, status", [("cancel", RunStatus.CANCELLED), ("pause", RunStatus.PAUSED)])
def test_a_dead_workers_attempt_is_marked_lost_when_steering_stops_its_run(people, scripted, method, status):
    class WorkerDied(BaseException):
        pass

    def during(n, ctx):
        if len(agent.calls) == 1:
            raise WorkerDied()

    agent = scripted(steps=1, during=during)
    run = start(people, "work", "scripted")
    with pytest.raises(WorkerDied):
        drain()
    steer(people, run, method)
    Run.objects.filter(pk=run.pk).update(lease_owner="dead", lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert drain() == 1  # the next worker meets the steering at the boundary: the call stops there
    run.refresh_from_db()
    assert run.status == status
    assert list(ToolCall.objects.filter(run=run).values_list("attempt", "outcome")) == [(1, "lost")]


def test_a_hard_cancel_after_a_pause_ends_the_run_and_leaves_no_flag_behind(people, scripted):
    def during(n, ctx):
        steer(people, run, "pause")
        steer(people, run, "cancel", {"hard": True})
        ctx.sleep(5)  # interrupted within ~0.1 s

    scripted(steps=1, during=during)
    run = start(people, "work", "scripted")
    drain()
    run.refresh_from_db()
    assert (run.status, run.hard_cancel) == (RunStatus.CANCELLED, False)
    assert list(ToolCall.objects.filter(run=run).values_list("attempt", "outcome")) == [(1, "interrupted")]


def test_a_duplicate_dispatch_finds_nothing_to_do(people, scripted):
    agent = scripted(steps=2)
    run = start(people, "work", "scripted")
    assert drain() == 3 and drain() == 0  # two calls and the finish, one step each
    assert not advance(run.pk)  # a delivery naming the finished run claims nothing
    assert agent.calls == [1, 2]


class _ApproveThenBreak:
    """A tool's approval rule that answers once, then raises: a bug met again when the
    approved call is picked up, inside the claim's own transaction."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, args: dict) -> bool:
        self.asked += 1
        if self.asked > 1:
            raise KeyError("the rule broke")
        return True


class _OneCall:
    def decide(self, view):
        return Finish("done") if view.history else CallTool("fetch", {})


@pytest.fixture
def breaks_when_claimed():
    rule = _ApproveThenBreak()
    tool = Tool("fetch", lambda args, ctx: "fetched", approval=rule)
    register_agent(Agent(id="breaks", description="test", planner=_OneCall, tools={"fetch": tool}))
    yield
    unregister_agent("breaks")


def test_a_crash_in_the_claims_own_transaction_fails_the_run_once(people, breaks_when_claimed):
    alice = people.caller("alice")
    run, _ = run_start(caller=alice, query="go", agent_id="breaks")
    drain()
    steering_submit(caller=alice, run_id=run.pk, method="approve", payload={})
    assert drain() == 1  # claimed, crashed, and ended: not ready again
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "KeyError" in run.failure_message
    assert run.lease_owner == ""
    assert drain() == 0
