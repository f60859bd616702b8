"""Pause decisions: the token and identity rules of PROTOCOL §4, single use, terminal
rejections, and refusals that change nothing."""

import re

import pytest

from approvals.domain.services import pause_sweep_overdue
from approvals.models import Decision, DecisionRefusal, Pause, PauseState
from runs.application import run_start, steering_submit
from runs.domain.tokens import token_unseal
from runs.kernel.errors import AlreadyResumed, NotFound, PayloadInvalid, ScopeMismatch, UnknownMethod
from runs.models import Event, RunStatus
from runs.runtime.dispatch import drain
from tests.conftest import db_snapshot
from tests.factories import PauseFactory


@pytest.fixture
def parked(people, probe):
    """A probe run of alice's (session s1), parked on its approval gate."""
    pause = PauseFactory.create(caller=people.caller("alice"))
    run = pause.run
    assert run.status == RunStatus.PAUSED and pause.is_open
    return run, pause, token_unseal(pause.token_sealed)


def decide(caller, run, method="approve", **payload):
    return steering_submit(caller=caller, run_id=run.pk, method=method, payload=payload)


def test_the_pausing_identity_approves_with_its_token_and_the_gated_call_runs_once(people, parked, probe):
    run, pause, token = parked
    decide(people.caller("alice"), run, token=token, reason="go")
    pause.refresh_from_db()
    assert (pause.state, pause.decision, pause.decided_by.username, pause.decision_reason) == (
        PauseState.RESUMED,
        Decision.APPROVE,
        "alice",
        "go",
    )
    assert pause.on_behalf_of == "acme/alice/s1"
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and run.answer == "launched moon"
    assert probe.calls == [{"target": "moon"}]


def test_a_delegated_approver_decides_and_the_audit_names_actor_and_principal(people, parked):
    run, pause, _ = parked
    decide(people.caller("bob", "web"), run, args={"target": "mars"}, reason="mars is closer")
    pause.refresh_from_db()
    assert (pause.decided_by.username, pause.decided_session, pause.on_behalf_of) == ("bob", "web", "acme/alice/s1")
    drain()
    run.refresh_from_db()
    assert run.answer == "launched mars"


def test_a_second_decision_is_refused_already_resumed_naming_the_state(people, parked):
    run, pause, token = parked
    decide(people.caller("bob", "web"), run)
    for caller, payload in [(people.caller("bob", "web"), {}), (people.caller("alice"), {"token": token})]:
        with pytest.raises(AlreadyResumed, match="resumed .*approve"):
            decide(caller, run, "reject", **payload)


def test_reject_is_terminal_the_gated_body_never_runs(people, parked, probe):
    run, pause, token = parked
    decide(people.caller("bob", "web"), run, "reject", reason="not today")
    drain()
    run.refresh_from_db()
    assert (run.status, run.failure_code) == (RunStatus.FAILED, "constraints_conflict")
    assert probe.calls == []
    with pytest.raises(AlreadyResumed):
        decide(people.caller("alice"), run, "approve", token=token)
    types = [t for t in Event.objects.filter(run=run).values_list("type", flat=True) if not t.startswith("control.")]
    assert types[-3:] == ["pause.resumed", "tool.rejected", "task.failed"]
    assert list(Event.objects.filter(run=run, type__startswith="control.").values_list("type", "payload__Err")) == [
        ("control.received", ""),
        ("control.applied", ""),  # the reject
        ("control.received", ""),
        ("control.rejected", "already_resumed"),  # the late approve
    ]


def test_an_overdue_pause_times_out_terminally(people, expiring_probe):
    from datetime import timedelta

    from django.utils import timezone

    run, _ = run_start(caller=people.caller("alice"), query="launch", agent_id="probe")
    drain()
    pause = Pause.objects.get(run=run)
    assert pause.expires_at is not None
    assert pause_sweep_overdue(now=timezone.now()) == 0
    assert pause_sweep_overdue(now=pause.expires_at + timedelta(seconds=1)) == 1
    pause.refresh_from_db()
    run.refresh_from_db()
    assert (pause.decision, run.status, run.failure_code) == (
        Decision.TIMEOUT,
        RunStatus.FAILED,
        "constraints_conflict",
    )
    assert expiring_probe.calls == []
    with pytest.raises(AlreadyResumed):
        decide(people.caller("bob", "web"), run)


def test_a_decision_after_the_deadline_is_refused_naming_it_and_never_shown_as_approved(people, expiring_probe):
    from datetime import timedelta

    import time_machine

    run, _ = run_start(caller=people.caller("alice"), query="launch", agent_id="probe")
    drain()
    pause = Pause.objects.get(run=run)
    deadline = pause.expires_at
    assert deadline is not None
    with time_machine.travel(deadline + timedelta(seconds=1), tick=False):  # before the sweep comes
        with pytest.raises(AlreadyResumed, match=re.escape(f"expired at {deadline.isoformat(timespec='seconds')}")):
            decide(people.caller("bob", "web"), run)
        pause.refresh_from_db()
        assert (pause.state, pause.decision) == (PauseState.PAUSED, "")
        assert pause_sweep_overdue() == 1
    pause.refresh_from_db()
    assert pause.decision == Decision.TIMEOUT and expiring_probe.calls == []


@pytest.mark.parametrize(
    "who, error",
    [
        (("alice", "s2"), ScopeMismatch),  # the owner, from another session
        (("mallory", "s1"), NotFound),  # another member of the tenant: the run is not visible
        (("olivia", "s1"), ScopeMismatch),  # an operator steers but does not approve gates
    ],
)
def test_other_sessions_and_users_without_permission_are_refused(people, parked, who, error):
    run, _, token = parked
    before = db_snapshot()
    with pytest.raises(error):
        decide(people.caller(*who), run, token=token)
    assert db_snapshot() == before


def test_another_tenant_cannot_see_or_decide_and_the_refusal_is_audited(people, parked):
    run, _, token = parked
    before = db_snapshot()
    gina = people.caller("gina")
    with pytest.raises(NotFound):
        decide(gina, run, token=token)
    assert db_snapshot() == before
    assert not Event.objects.filter(type="control.rejected").exists()  # nothing leaks into acme's stream


def test_wrong_foreign_and_unknown_tokens_are_refused_alike_and_audited(people, parked, probe):
    run, _, token = parked
    other_run, _ = run_start(caller=people.caller("alice"), query="launch again", agent_id="probe")
    drain()
    other_token = token_unseal(Pause.objects.get(run=other_run).token_sealed)
    alice = people.caller("alice")
    messages = set()
    for bad in (other_token, "hrbp_" + "A" * 43, token[:-1]):
        with pytest.raises(NotFound) as refused:
            decide(alice, run, token=bad)
        messages.add(refused.value.message)
    assert len(messages) == 1
    assert DecisionRefusal.objects.filter(actor_user="alice", code="not_found").count() == 3
    assert Pause.objects.filter(state=PauseState.PAUSED).count() == 2


def test_a_copy_of_the_database_lifts_no_pause(people, parked):
    run, pause, token = parked
    row = Pause.objects.filter(pk=pause.pk).values().first()
    assert row is not None
    stored = [str(v) for v in row.values() if v]
    stored += [str(v) for e in Event.objects.filter(run=run) for v in e.payload.values()]
    assert token not in " ".join(stored)
    alice = people.caller("alice")
    for candidate in (pause.token_digest, pause.token_sealed, pause.pk):
        with pytest.raises(NotFound):
            decide(alice, run, token=candidate)
    pause.refresh_from_db()
    assert pause.is_open


@pytest.mark.parametrize(
    "method, payload, error",
    [
        ("approve", {"args": {"rocket": "big"}}, PayloadInvalid),  # an argument the tool does not take
        ("approve", {"args": "moon"}, PayloadInvalid),
        ("approve", {"reason": 5}, PayloadInvalid),
        ("resume", {}, NotFound),  # resume does not decide approval gates: the run has no other pause open
        ("launch", {}, UnknownMethod),
    ],
)
def test_malformed_decisions_change_nothing(people, parked, method, payload, error):
    run, *_ = parked
    before = db_snapshot()
    with pytest.raises(error):
        decide(people.caller("bob", "web"), run, method, **payload)
    assert db_snapshot() == before


def test_edited_arguments_need_an_editable_gate(people, parked):
    run, pause, _ = parked
    from runs.runtime.registry import get_agent

    tool = get_agent("probe").tools["launch"]
    assert tool.editable_args
    Pause.objects.filter(pk=pause.pk).settle(payload={**pause.payload, "Editable": False})
    with pytest.raises(PayloadInvalid, match="does not allow edited arguments"):
        decide(people.caller("bob", "web"), run, args={"target": "mars"})


def test_the_steering_audit_keeps_no_token(people, parked):
    run, _, token = parked
    decide(people.caller("alice"), run, token=token, reason="go")
    from runs.models import SteeringInstruction

    (audit,) = SteeringInstruction.objects.filter(run=run)
    assert audit.instruction == "approve" and audit.payload == {"reason": "go"}
