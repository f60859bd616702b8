"""The A2A leg end to end against the live travel desk process: the run parks on the
remote agent's question, the answer goes to the same remote task, which completes."""

import time

import pytest

import outbox
from approvals.models import Cause, Decision, Pause, Reason
from outbox.models import OutboxMessage
from runs.kernel.errors import PayloadInvalid
from runs.models import Run, RunStatus, SteeringInstruction, ToolCall
from runs.runtime.dispatch import drain
from tests.a2a.helpers import configure, open_pause, payloads, remote, start, steer
from tests.travel_desk import restart_desk, start_desk, stop_desk


def drain_in_thread() -> None:
    """Another worker: drains, then closes its own database connection."""
    from django.db import connection

    try:
        drain()
    finally:
        connection.close()


def ledger(run: Run) -> list[tuple[int, int, str]]:
    return list(ToolCall.objects.filter(run=run).order_by("step", "attempt").values_list("step", "attempt", "outcome"))


@pytest.mark.parametrize("desk", ["travel_desk", "polling_desk"])
def test_a_question_is_answered_and_the_same_remote_task_completes(people_tx, desk, request):
    url = request.getfixturevalue(desk).url
    configure(people_tx, url)
    run = start(people_tx, "Book a flight to Lisbon")
    drain()

    pause = open_pause(run)
    asked = payloads(run, "a2a.input_required")
    assert (pause.cause, pause.reason, pause.tool) == (Cause.A2A, Reason.AWAIT_INPUT, "delegate")
    assert pause.payload["Question"] == "Which date do you want to fly?"
    assert len(asked) == 1 and asked[0]["Agent"] == "travel-desk" and asked[0]["PauseToken"].startswith("hrbp_")
    task_id, context_id = asked[0]["RemoteTaskID"], asked[0]["ContextID"]
    assert (pause.payload["RemoteTaskID"], pause.tool_context["a2a"]["task_id"]) == (task_id, task_id)
    assert payloads(run, "pause.requested")[0]["Cause"] == "a2a"
    assert (
        payloads(run, "notification.pause_requested")[0]["Summary"]
        == "travel-desk asks: Which date do you want to fly?"
    )
    assert remote(url, task_id).state == "input-required"

    steer(people_tx, run, "resume", {"input": "March 3"})
    drain()

    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert run.answer.startswith("Booked a flight to Lisbon on March 3.")
    completed = payloads(run, "tool.completed")[-1]
    assert (completed["RemoteTaskID"], completed["ContextID"], completed["Agent"]) == (
        task_id,
        context_id,
        "travel-desk",
    )
    assert completed["Result"]["Artifact"] == run.answer
    invoked = payloads(run, "tool.invoked")
    assert [i["ContextID"] for i in invoked] == [context_id, context_id]
    assert invoked[1]["RemoteTaskID"] == task_id  # the resumed call names the task it goes on with
    held = remote(url, task_id)
    assert held.state == "completed" and held.context_id == context_id and held.artifact == run.answer
    assert ledger(run) == [(0, 1, "paused"), (0, 2, "completed")]


def test_auth_required_parks_on_external_event_and_a_resume_with_the_credential_goes_on(people_tx, travel_desk):
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Oslo, this needs auth")
    drain()
    pause = open_pause(run)
    auth = payloads(run, "a2a.auth_required")
    assert (pause.cause, pause.reason) == (Cause.A2A, Reason.EXTERNAL_EVENT)
    assert auth[0]["Question"].startswith("Sign in to the travel desk") and auth[0]["RemoteTaskID"]
    task_id = auth[0]["RemoteTaskID"]

    steer(people_tx, run, "resume", {"input": "wrong-code"})  # the desk asks again: a new pause, same task
    drain()
    again = open_pause(run)
    assert again.pk != pause.pk and again.reason == Reason.EXTERNAL_EVENT
    assert again.payload["Question"].startswith("That code was not accepted")
    decided = Pause.objects.get(pk=pause.pk)
    assert "wrong-code" not in str(decided.decision_input)  # a credential is sealed at rest

    steer(people_tx, run, "resume", {"input": "desk-code-42"})
    drain()
    question = open_pause(run)
    assert question.reason == Reason.AWAIT_INPUT and question.payload["RemoteTaskID"] == task_id
    steer(people_tx, run, "resume", {"input": "May 1"})
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and "Oslo on May 1" in run.answer
    assert remote(travel_desk.url, task_id).state == "completed"
    assert {p["RemoteTaskID"] for p in payloads(run, "a2a.auth_required") + payloads(run, "a2a.input_required")} == {
        task_id
    }
    # The steering audit (tasks/get's history, the admin) keeps the credentials sealed too.
    inputs = [i.payload["input"] for i in SteeringInstruction.objects.filter(run=run).order_by("pk")]
    assert inputs == ["<sealed>", "<sealed>", "May 1"]


def test_a_restarted_desk_goes_on_with_the_tasks_it_had(people_tx):
    """The desk keeps its tasks in its store, not in memory: a run parked at its sign-in,
    then at its question, goes on with the same remote task across two restarts."""
    desk = start_desk()
    try:
        configure(people_tx, desk.url)
        run = start(people_tx, "Book a flight to Oslo, this needs auth")
        drain()
        task_id = payloads(run, "a2a.auth_required")[0]["RemoteTaskID"]

        restart_desk(desk)
        assert remote(desk.url, task_id).state == "auth-required"
        steer(people_tx, run, "resume", {"input": "desk-code-42"})
        drain()
        assert open_pause(run).payload["Question"] == "Which date do you want to fly?"

        restart_desk(desk)
        steer(people_tx, run, "resume", {"input": "June 2"})
        drain()
        run.refresh_from_db()
        assert run.status == RunStatus.COMPLETE and "Oslo on June 2" in run.answer
        assert remote(desk.url, task_id).state == "completed"
    finally:
        stop_desk(desk)


def test_a_parked_run_cancelled_while_its_desk_restarts_still_cancels_the_remote_task(people_tx, settings):
    """The cancel is owed in the outbox: an attempt while the desk is down is retried later,
    after the backoff, and reaches the desk once it is back."""
    settings.HARBOR_OUTBOX_BACKOFF_SECONDS = 60
    desk = start_desk()
    try:
        configure(people_tx, desk.url)
        run = start(people_tx, "Book a flight to Porto")
        drain()
        task_id = open_pause(run).payload["RemoteTaskID"]
        desk.process.terminate()
        desk.process.wait(timeout=10)
        steer(people_tx, run, "cancel", {})  # the desk is down: its cancel waits for it
        assert outbox.deliver_due() == 0
        owed = OutboxMessage.objects.get(kind="a2a.cancel")
        assert (owed.state, owed.attempts) == ("pending", 1) and owed.last_error
        restart_desk(desk)  # terminating the stopped process again is harmless
        assert outbox.deliver_due() == 0  # not due before its backoff
        OutboxMessage.objects.update(next_attempt_at=owed.created_at)  # the backoff has passed
        assert outbox.deliver_due() == 1
        assert remote(desk.url, task_id).state == "canceled"
        assert OutboxMessage.objects.get(pk=owed.pk).attempts == 2
    finally:
        stop_desk(desk)


@pytest.mark.parametrize(
    ("query", "remote_state", "words"),
    [
        ("Book a flight to Rome, it will fail", "failed", "No seats left"),
        ("Book a flight to Mars, it will be rejected", "rejected", "does not book that trip"),
    ],
)
def test_a_remote_failure_or_rejection_fails_the_tool_with_the_remote_message(
    people_tx, travel_desk, query, remote_state, words
):
    configure(people_tx, travel_desk.url)
    run = start(people_tx, query)
    drain()
    run.refresh_from_db()
    failed = payloads(run, "tool.failed")
    assert run.status == RunStatus.FAILED and words in run.failure_message
    assert len(failed) == 1 and words in failed[0]["Error"] and remote_state in failed[0]["Error"]
    assert failed[0]["Agent"] == "travel-desk" and failed[0]["RemoteTaskID"] and failed[0]["ContextID"]
    assert remote(travel_desk.url, failed[0]["RemoteTaskID"]).state == remote_state
    assert not Pause.objects.filter(run=run).exists()


def test_a_remote_task_cancelled_by_the_remote_side_fails_the_tool(people_tx, travel_desk):
    from approvals.a2a import bridge, wire
    from approvals.a2a.directory import RemoteAgent

    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Paris")
    drain()
    task_id = open_pause(run).payload["RemoteTaskID"]
    bridge.call(wire.cancel(RemoteAgent(name="other", card_url=travel_desk.url), task_id))  # someone else cancels
    steer(people_tx, run, "resume", {"input": "June 2"})
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "canceled" in run.failure_message
    history = remote(travel_desk.url, task_id)
    assert history.state == "canceled" and len(history.message_ids) == 3  # the answer was never sent


def test_an_unreachable_remote_agent_is_retried_with_backoff_then_fails(people_tx, monkeypatch):
    from tests.live import free_port

    configure(people_tx, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    run = start(people_tx, "Book a flight to Lima")
    began = time.monotonic()
    drain()
    elapsed = time.monotonic() - began
    run.refresh_from_db()
    failed = payloads(run, "tool.failed")
    assert run.status == RunStatus.FAILED and "unreachable or not speaking A2A after 3 attempts" in failed[0]["Error"]
    assert 0.3 <= elapsed < 10  # two backoffs of 0.1 s and 0.2 s, bounded
    assert ledger(run) == [(0, 1, "failed")]


def test_a_remote_agent_answering_garbage_fails_the_tool_after_bounded_retries(people_tx):
    import http.server
    import threading

    hits = []

    class Garbage(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"not": "an agent card", "capabilities": 7}')

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Garbage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        configure(people_tx, f"http://127.0.0.1:{server.server_port}")
        run = start(people_tx, "Book a flight to Quito")
        drain()
    finally:
        server.shutdown()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "after 3 attempts" in run.failure_message
    assert hits == ["/.well-known/agent-card.json"] * 3


@pytest.mark.parametrize(
    "answer", ["", "   ", "x" * 2001, {"date": "March 3"}], ids=["empty", "blank", "too-long", "object"]
)
def test_an_empty_or_too_large_answer_is_refused_and_changes_nothing(people_tx, travel_desk, answer):
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Cairo")
    drain()
    pause = open_pause(run)
    with pytest.raises(PayloadInvalid):
        steer(people_tx, run, "resume", {"input": answer})
    assert open_pause(run).pk == pause.pk and Run.objects.get(pk=run.pk).status == RunStatus.PAUSED
    assert remote(travel_desk.url, pause.payload["RemoteTaskID"]).state == "input-required"


def wait_for_remote(url: str, task_id: str, state: str, seconds: float = 10) -> str:
    deadline = time.monotonic() + seconds
    while (current := remote(url, task_id).state) != state and time.monotonic() < deadline:
        time.sleep(0.1)
    return current


def test_cancelling_a_parked_run_cancels_the_remote_task(people_tx, travel_desk):
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Tunis")
    drain()
    task_id = open_pause(run).payload["RemoteTaskID"]
    steer(people_tx, run, "cancel", {})
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert Pause.objects.get(run=run).decision == Decision.CANCEL
    assert remote(travel_desk.url, task_id).state == "input-required"  # owed, not sent yet
    assert outbox.deliver_due() == 1
    assert remote(travel_desk.url, task_id).state == "canceled"


def test_a_cancel_that_reaches_an_answered_remote_call_before_it_goes_on_cancels_the_remote_task(
    people_tx, travel_desk
):
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Vienna")
    drain()
    task_id = open_pause(run).payload["RemoteTaskID"]
    steer(people_tx, run, "resume", {"input": "March 3"})  # ready for its next step, not begun yet
    steer(people_tx, run, "cancel", {})  # at the run before its call goes on
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert ledger(run) == [(0, 1, "paused")]  # the answered call never went on
    assert outbox.deliver_due() == 1
    assert remote(travel_desk.url, task_id).state == "canceled"


@pytest.mark.parametrize("desk", ["travel_desk", "polling_desk"])
def test_a_remote_task_that_never_settles_fails_the_call_loudly_and_is_cancelled(people_tx, desk, request, monkeypatch):
    url = request.getfixturevalue(desk).url
    monkeypatch.setenv("HARBOR_A2A_SETTLE_SECONDS", "1")  # the slow desk takes 3 s
    configure(people_tx, url)
    run = start(people_tx, "Book a flight to Oslo, the desk is slow")
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "did not settle in 1 s" in run.failure_message
    assert outbox.deliver_due() == 1
    found = remote_task_of(run, url, "canceled")
    assert found is not None and found.state == "canceled"
    assert ledger(run) == [(0, 1, "failed")]


def test_a_hard_cancel_during_a_slow_remote_call_cancels_the_remote_task(people_tx, travel_desk):
    import threading

    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Baku, the desk is slow")
    worker = threading.Thread(target=drain_in_thread)
    worker.start()
    found = remote_task_of(run, travel_desk.url, "working")
    assert found is not None
    steer(people_tx, run, "cancel", {"hard": True})
    worker.join(timeout=20)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert outbox.deliver_due() == 1
    assert remote(travel_desk.url, found.task_id).state == "canceled"
    assert ledger(run) == [(0, 1, "interrupted")]


def test_a_pause_outliving_its_deadline_times_out_and_cancels_the_remote_task(people_tx, travel_desk, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from approvals.domain.services import pause_sweep_overdue

    monkeypatch.setenv("HARBOR_A2A_PAUSE_SECONDS", "60")
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Accra")
    drain()
    pause = open_pause(run)
    assert pause.expires_at is not None
    assert pause_sweep_overdue(now=timezone.now() + timedelta(minutes=2)) == 1
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and Pause.objects.get(pk=pause.pk).decision == Decision.TIMEOUT
    assert outbox.deliver_due() == 1
    assert remote(travel_desk.url, pause.payload["RemoteTaskID"]).state == "canceled"


def test_a_plain_cancel_during_a_slow_remote_call_stops_waiting_and_cancels_the_remote_task(people_tx, travel_desk):
    import threading

    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Minsk, the desk is slow")
    worker = threading.Thread(target=drain_in_thread)
    worker.start()
    found = remote_task_of(run, travel_desk.url, "working")
    assert found is not None
    began = time.monotonic()
    steer(people_tx, run, "cancel", {})
    worker.join(timeout=20)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and time.monotonic() - began < 3.5  # the desk takes 4 s
    assert outbox.deliver_due() == 1
    assert remote(travel_desk.url, found.task_id).state == "canceled"
    assert not Pause.objects.filter(run=run).exists()


def remote_task_of(run: Run, url: str, state: str, seconds: float = 10):
    """The remote task a run's call started, found by its context like a retry would, once
    it is in `state` (the desk accepts a task as submitted before it starts working)."""
    from approvals.a2a import bridge, wire
    from approvals.a2a.directory import RemoteAgent

    desk = RemoteAgent(name="check", card_url=url)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        key = ToolCall.objects.filter(run=run).values_list("idempotency_key", flat=True).first()
        found = bridge.call(wire.find_in_context(desk, wire.stable_id(key))) if key else None
        if found is not None and found.state == state:
            return found
        time.sleep(0.05)
    return None


def test_a_named_oauth_source_the_tenant_does_not_have_leaves_the_credential_to_a_resume(people_tx, travel_desk):
    """The desk names `calendar`, which acme has not configured: no sign-in is offered, and
    the pause wants a credential in its resume, as for any auth-required task."""
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Quito, the desk needs my calendar")
    drain()
    pause = open_pause(run)
    assert (pause.cause, pause.reason) == (Cause.A2A, Reason.EXTERNAL_EVENT)
    assert "AuthorizeURL" not in pause.payload and "SourceName" not in pause.payload
    with pytest.raises(PayloadInvalid):
        steer(people_tx, run, "resume", {})
    assert open_pause(run).pk == pause.pk
    steer(people_tx, run, "resume", {"input": "not-a-calendar-token"})  # the desk checks it, and asks again
    drain()
    again = open_pause(run)
    assert again.pk != pause.pk and again.payload["Question"].startswith("The calendar did not accept")
    assert again.payload["RemoteTaskID"] == pause.payload["RemoteTaskID"]
