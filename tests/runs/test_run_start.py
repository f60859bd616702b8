import pytest

from runs.application import run_start
from runs.kernel.errors import InvalidRequest, NotFound, PayloadInvalid, ScopeMismatch
from runs.models import Event, Run, RunStatus
from tests.conftest import db_snapshot


def test_start_creates_a_pending_run_owned_by_the_caller_and_narrates_it(people):
    run, reused = run_start(caller=people.caller("alice"), query="count to 3", agent_id="countdown", priority=-5)
    assert not reused and run.status == RunStatus.PENDING
    assert (run.tenant, run.owner.username, run.session, run.priority) == (people.acme, "alice", "s1", -5)
    spawned = Event.objects.get(run=run)
    assert spawned.type == "task.spawned" and spawned.payload == {
        "TaskID": run.pk,
        "Priority": -5,
        "ParentTaskID": None,
    }


def test_a_priority_above_the_default_needs_the_admin_scope(people):
    with pytest.raises(ScopeMismatch):
        run_start(caller=people.caller("alice"), query="count to 3", agent_id="countdown", priority=1000)
    assert not Run.objects.exists()
    run, _ = run_start(caller=people.caller("ada"), query="count to 3", agent_id="countdown", priority=1000)
    assert run.priority == 1000


def test_an_idempotency_key_is_per_identity(people):
    first, _ = run_start(caller=people.caller("alice"), query="q", agent_id="countdown", idempotency_key="k1")
    again, reused = run_start(caller=people.caller("alice"), query="other", agent_id="countdown", idempotency_key="k1")
    assert reused and again.pk == first.pk
    other_session, reused = run_start(
        caller=people.caller("alice", "s2"), query="q", agent_id="countdown", idempotency_key="k1"
    )
    assert not reused and other_session.pk != first.pk
    assert Run.objects.count() == 2


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"query": ""}, InvalidRequest),
        ({"query": 42}, InvalidRequest),
        ({"query": "x" * 5000}, PayloadInvalid),
        ({"query": "q", "agent_id": "nope"}, InvalidRequest),
        ({"query": "q", "priority": "high"}, InvalidRequest),
        ({"query": "q", "priority": True}, InvalidRequest),
        ({"query": "q", "priority": 10**6}, InvalidRequest),
        ({"query": "q", "cancel_policy": "orphan"}, InvalidRequest),
        ({"query": "q", "idempotency_key": ""}, InvalidRequest),
        ({"query": "q", "parent_run": "01UNKNOWN"}, NotFound),
    ],
)
def test_bad_input_is_refused_with_a_typed_error_and_changes_nothing(people, kwargs, error):
    before = db_snapshot()
    with pytest.raises(error):
        run_start(caller=people.caller("alice"), **{"agent_id": "countdown", **kwargs})
    assert db_snapshot() == before and not Event.objects.exists()


def test_a_parent_run_of_another_tenant_is_not_found(people):
    parent, _ = run_start(caller=people.caller("gina"), query="q", agent_id="countdown")
    with pytest.raises(NotFound):
        run_start(caller=people.caller("alice"), query="q", agent_id="countdown", parent_run=parent.pk)
