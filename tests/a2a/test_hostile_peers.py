"""A remote agent is someone else's server. Each test here runs a hostile one on loopback
(tests/a2a/hostile.py) and shows the house holds: every call bounded in time and bytes, a
cancel that ends the run whatever the agent does, what a person sees bounded, calls and the
credential kept on the card's origin, and a task that is not the run's refused."""

import threading
import time

import pytest
from a2a.types import TaskState

import outbox
from approvals.a2a.models import RemoteAgent
from runs.models import Run, RunStatus
from runs.runtime.dispatch import drain
from tests.a2a.helpers import drain_on_another_worker, open_pause, payloads, start, steer
from tests.a2a.hostile import HostilePeer, answer, endless_stream, flood, task, trickle

NO_TASKS = answer({"tasks": []})


def configure(people, url: str, auth: str = "") -> None:
    agent, _ = RemoteAgent.objects.update_or_create(tenant=people.acme, name="travel-desk", defaults={"card_url": url})
    if auth:
        agent.set_auth_header(auth)
        agent.save()


def drained_within(seconds: float) -> bool:
    """Drain on another worker thread; whether it was done within `seconds`."""
    worker = drain_on_another_worker()
    worker.join(seconds)
    return not worker.is_alive()


def failed(run: Run) -> Run:
    """The run, failed by its remote agent: the page shows the code and the message as is."""
    run.refresh_from_db()
    assert (run.status, run.failure_code) == (RunStatus.FAILED, "remote_agent"), run.failure_message
    assert (
        run.failure_message.startswith("delegate: remote agent travel-desk") or "the answer from" in run.failure_message
    )
    return run


def wait_for(predicate, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def bounded(settings):
    settings.HARBOR_A2A_CALL_SECONDS = 1
    return settings


@pytest.mark.parametrize("trickled", ["card", "ListTasks", "SendMessage"])
def test_an_agent_trickling_its_answer_fails_the_step_at_the_call_bound(people_tx, bounded, trickled):
    def script(method: str, params: dict):
        if method == trickled:
            return trickle()
        return NO_TASKS

    card = (lambda path: trickle()) if trickled == "card" else None
    with HostilePeer(script, card=card) as peer:
        configure(people_tx, peer.url)
        run = start(people_tx, "Book a flight to Lisbon")
        began = time.monotonic()
        assert drained_within(20), "the trickling agent held the worker"
    run = failed(run)
    assert time.monotonic() - began < 10
    assert run.failure_message == "delegate: remote agent travel-desk did not answer within 1 s"


@pytest.mark.parametrize("working", [False, True], ids=["silent", "working"])
def test_an_endless_stream_ends_at_the_call_bound_and_a_task_left_working_at_the_settle_bound(
    people_tx, bounded, monkeypatch, working
):
    """A stream that stays open and says nothing ends at the call bound; one that named a
    working task is then polled, and a task working for ever ends at the settle bound."""
    monkeypatch.setenv("HARBOR_A2A_SETTLE_SECONDS", "3")
    holder: dict[str, str] = {}

    def script(method: str, params: dict):
        if method == "ListTasks":
            return NO_TASKS
        if method == "SendStreamingMessage":
            holder["context"] = sent_context(params)
            first = task("t-1", holder["context"], TaskState.TASK_STATE_WORKING) if working else None
            return endless_stream(first)
        return answer(task("t-1", holder["context"], TaskState.TASK_STATE_WORKING))

    with HostilePeer(script, streaming=True) as peer:
        configure(people_tx, peer.url)
        run = start(people_tx, "Book a flight to Lisbon")
        assert drained_within(20), "the endless stream held the worker"
    run = failed(run)
    if working:
        assert "its task did not settle in 3 s" in run.failure_message and "GetTask" in peer.methods()
    else:
        assert "did not answer within 1 s" in run.failure_message


@pytest.mark.parametrize("hard", [True, False], ids=["hard", "plain"])
def test_a_cancel_ends_a_run_held_by_a_trickling_agent_and_its_remote_cancel_is_bounded(people_tx, settings, hard):
    settings.HARBOR_A2A_CALL_SECONDS = 300  # the call alone would hold the run for minutes
    with HostilePeer(lambda method, params: trickle()) as peer:
        configure(people_tx, peer.url)
        run = start(people_tx, "Book a flight to Lisbon")
        worker = threading.Thread(target=drained_within, args=(60,), daemon=True)
        worker.start()
        wait_for(lambda: "ListTasks" in peer.methods())
        began = time.monotonic()
        steer(people_tx, run, "cancel", {"hard": True} if hard else {})
        worker.join(10)
        assert not worker.is_alive() and time.monotonic() - began < 5
        run.refresh_from_db()
        assert run.status == RunStatus.CANCELLED
        # The remote cancel it owes meets the same agent: bounded, retried later by the outbox.
        settings.HARBOR_A2A_CALL_SECONDS = 1
        began = time.monotonic()
        assert outbox.deliver_due() == 0
        assert time.monotonic() - began < 5


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
def test_an_answer_larger_than_the_cap_is_refused_without_reading_it_whole(people_tx, settings, declared):
    settings.HARBOR_A2A_MAX_RESPONSE_BYTES = 1024 * 1024
    with HostilePeer(lambda method, params: flood(20 * 1024 * 1024, declared=declared)) as peer:
        configure(people_tx, peer.url)
        run = start(people_tx, "Book a flight to Lisbon")
        assert drained_within(20)
    run = failed(run)
    assert f"the answer from {peer.url}/a2a/jsonrpc" in run.failure_message and "1.0 MB" in run.failure_message
    assert peer.methods() == ["ListTasks"]  # not retried: the agent would send as much again


def sent_context(params: dict) -> str:
    return params["message"]["contextId"]


def test_a_huge_question_and_a_huge_artifact_are_cut_with_a_visible_note(people_tx, settings):
    settings.HARBOR_A2A_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
    question, artifact = "Which date? " + "q" * 3_000_000, "Booked. " + "a" * 2_000_000

    held: dict[str, str] = {}

    def script(method: str, params: dict):
        if method == "ListTasks":
            return NO_TASKS
        if method == "SendMessage" and "taskId" not in params["message"]:
            return answer(
                {"task": task("t-1", sent_context(params), TaskState.TASK_STATE_INPUT_REQUIRED, message=question)}
            )
        if method == "GetTask":
            return answer(task("t-1", held["context"], TaskState.TASK_STATE_INPUT_REQUIRED, message=question))
        return answer({"task": task("t-1", sent_context(params), TaskState.TASK_STATE_COMPLETED, artifact=artifact)})

    with HostilePeer(script) as peer:
        configure(people_tx, peer.url)
        run = start(people_tx, "Book a flight to Lisbon")
        drain()
        pause = open_pause(run)
        shown = pause.payload["Question"]
        assert shown.startswith("Which date? qqq") and len(shown.encode()) < 65 * 1024
        assert shown.endswith("… (truncated: 2.9 MB from the agent, showing the first 64 KB)")
        summary = payloads(run, "notification.pause_requested")[0]["Summary"]
        assert summary.startswith("travel-desk asks: Which date? qqq") and len(summary) < 1024
        held["context"] = pause.payload["ContextID"]
        steer(people_tx, run, "resume", {"input": "March 3"})
        drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert run.answer.startswith("Booked. aaa") and len(run.answer.encode()) < 65 * 1024
    assert run.answer.endswith("… (truncated: 1.9 MB from the agent, showing the first 64 KB)")


def test_a_card_sending_calls_to_another_host_is_refused_and_the_credential_never_leaves(people_tx):
    elsewhere_calls = []

    def elsewhere(method: str, params: dict):
        elsewhere_calls.append(method)
        return NO_TASKS

    with HostilePeer(elsewhere) as other:
        with HostilePeer(lambda method, params: NO_TASKS, rpc_base=other.url) as peer:
            configure(people_tx, peer.url, auth="Bearer tenant-secret")
            run = start(people_tx, "Book a flight to Lisbon")
            assert drained_within(20)
    run = failed(run)
    assert "not to the card's own origin" in run.failure_message and other.url in run.failure_message
    assert other.seen == [] and elsewhere_calls == []
    assert peer.seen and all(r.headers.get("authorization") == "Bearer tenant-secret" for r in peer.seen)
    assert len(peer.seen) == 1  # refused, not retried: the card says the same next time


def test_an_allowed_host_is_called_but_never_given_the_credential(people_tx, settings):
    def elsewhere(method: str, params: dict):
        if method == "ListTasks":
            return NO_TASKS
        context = sent_context(params)
        return answer({"task": task("t-9", context, TaskState.TASK_STATE_COMPLETED, artifact="Booked.")})

    with HostilePeer(elsewhere) as other:
        settings.HARBOR_A2A_ALLOWED_HOSTS = [other.url.removeprefix("http://")]
        with HostilePeer(lambda method, params: NO_TASKS, rpc_base=other.url) as peer:
            configure(people_tx, peer.url, auth="Bearer tenant-secret")
            run = start(people_tx, "Book a flight to Lisbon")
            drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and run.answer == "Booked."
    assert other.methods() == ["ListTasks", "SendMessage"]
    assert not any("authorization" in r.headers for r in other.seen)


@pytest.mark.parametrize("forged", ["SendMessage", "ListTasks"])
def test_a_task_carrying_another_runs_ids_is_refused(people_tx, forged):
    other = task("t-of-run-2", "context-of-run-2", TaskState.TASK_STATE_COMPLETED, artifact="Run 2's answer")

    def script(method: str, params: dict):
        if method == "ListTasks":
            return answer({"tasks": [other] if forged == "ListTasks" else []})
        return answer({"task": other})

    with HostilePeer(script) as peer:
        configure(people_tx, peer.url)
        run = start(people_tx, "Book a flight to Lisbon")
        drain()
    run = failed(run)
    assert "answered with task 't-of-run-2' in context 'context-of-run-2', not this call's" in run.failure_message
    assert not run.answer
