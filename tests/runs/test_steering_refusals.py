"""Bad steering input gets a typed error and changes nothing."""

import pytest

from runs.application import run_start, steering_submit
from runs.kernel.errors import InvalidRequest, NotFound, PayloadInvalid, ScopeMismatch, UnknownMethod
from runs.models import SteeringInstruction
from runs.runtime.dispatch import drain
from tests.conftest import db_snapshot


@pytest.fixture
def run(people):
    return run_start(caller=people.caller("alice"), query="count to 2", agent_id="countdown")[0]


def deep(levels: int):
    value: dict = {}
    for _ in range(levels):
        value = {"x": value}
    return value


@pytest.mark.parametrize(
    "method, payload, error",
    [
        ("launch_missiles", {}, UnknownMethod),
        ("redirect", {}, PayloadInvalid),
        ("redirect", {"goal": "  "}, PayloadInvalid),
        ("user_message", {"message": ""}, PayloadInvalid),
        ("user_message", {"message": ["hi"]}, PayloadInvalid),
        ("prioritize", {"priority": "9"}, PayloadInvalid),
        ("cancel", {"hard": "yes"}, PayloadInvalid),
        ("inject_context", {}, PayloadInvalid),
        ("inject_context", ["not", "an", "object"], InvalidRequest),
        ("inject_context", deep(7), PayloadInvalid),
        ("inject_context", {f"k{i}": i for i in range(65)}, PayloadInvalid),
        ("inject_context", {"list": list(range(51))}, PayloadInvalid),
        ("inject_context", {"text": "x" * 4097}, PayloadInvalid),
        ("inject_context", {f"k{i}": "x" * 4000 for i in range(5)}, PayloadInvalid),
    ],
)
def test_malformed_steering_is_refused_and_changes_nothing(people, run, method, payload, error):
    before = db_snapshot()
    with pytest.raises(error):
        steering_submit(caller=people.caller("alice"), run_id=run.pk, method=method, payload=payload)
    assert db_snapshot() == before


def test_another_tenant_and_unknown_runs_are_not_found(people, run):
    before = db_snapshot()
    for caller, run_id in [
        (people.caller("gina"), run.pk),
        (people.caller("alice"), "01NOSUCHRUN"),
        (people.caller("alice"), 42),
    ]:
        with pytest.raises(NotFound):
            steering_submit(caller=caller, run_id=run_id, method="cancel")
    assert db_snapshot() == before


def test_a_terminal_run_takes_no_more_steering(people, run):
    drain()
    before = db_snapshot()
    for method, payload in [("redirect", {"goal": "again"}), ("cancel", {}), ("pause", None)]:
        with pytest.raises(NotFound, match="complete"):
            steering_submit(caller=people.caller("alice"), run_id=run.pk, method=method, payload=payload)
    assert db_snapshot() == before


def test_scope_is_checked_per_method(people, run):
    with pytest.raises(NotFound):  # another member cannot see the run at all
        steering_submit(
            caller=people.caller("mallory"), run_id=run.pk, method="user_message", payload={"message": "hi"}
        )
    with pytest.raises(ScopeMismatch):  # the owner is below admin for prioritize
        steering_submit(caller=people.caller("alice"), run_id=run.pk, method="prioritize", payload={"priority": 1})
    # An operator steers as if the owner; the admin scope claim allows prioritize.
    steering_submit(caller=people.caller("olivia"), run_id=run.pk, method="redirect", payload={"goal": "g"})
    steering_submit(
        caller=people.caller("alice", scopes=["admin"]), run_id=run.pk, method="prioritize", payload={"priority": 3}
    )


def test_a_repeated_event_id_is_acknowledged_and_applied_once(people, run):
    alice = people.caller("alice")
    first = steering_submit(
        caller=alice, run_id=run.pk, method="user_message", payload={"message": "hi"}, event_id="evt-1"
    )
    again = steering_submit(
        caller=alice, run_id=run.pk, method="user_message", payload={"message": "hi"}, event_id="evt-1"
    )
    assert not first.replayed and again.replayed and again.instruction.pk == first.instruction.pk
    assert SteeringInstruction.objects.filter(run=run).count() == 1
    drain()
    run.refresh_from_db()
    assert run.messages == ["hi"]


def test_a_replayed_event_id_is_answered_only_to_a_caller_allowed_the_method(people, run):
    steering_submit(
        caller=people.caller("alice"), run_id=run.pk, method="user_message", payload={"message": "hi"}, event_id="evt-1"
    )
    snapshot = db_snapshot()
    with pytest.raises(ScopeMismatch):  # bob sees the run but may not message it: no receipt, no hint
        steering_submit(caller=people.caller("bob"), run_id=run.pk, method="cancel", event_id="evt-1")
    assert db_snapshot() == snapshot
