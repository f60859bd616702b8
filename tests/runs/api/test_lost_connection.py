"""A /v1/ request whose database connection the server drops mid-way (a restart, a failover)
reads back what it wrote and is answered as applied, else answered again once on a new
connection; a second loss is answered runtime_error with Retry-After. PostgreSQL, its
backends really terminated. (Each transaction boundary at each moment of the loss:
tests/runs/test_fault_matrix.py.)"""

import pytest
from django.db import connection

from approvals.models import Pause
from runs.domain.connection_loss import retry_once_if_lost
from runs.models import Event, Run
from runs.protocol.lost_connection import MESSAGE
from runs.runtime.dispatch import drain
from tests.conftest import requires_postgres
from tests.dropped_connections import LoseConnection, terminate_own_backend

from .conftest import Api

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


class Drop:
    """Drops the request's connection just before its first statements containing `marker`."""

    def __init__(self, marker: str, times: int = 1) -> None:
        self.marker, self.times, self.dropped = marker, times, 0

    def __call__(self, execute, sql, params, many, context):
        if self.dropped < self.times and self.marker in sql:
            self.dropped += 1
            terminate_own_backend()
        return execute(sql, params, many, context)


@pytest.fixture
def api(people_tx) -> Api:
    return Api()


def test_a_read_whose_connection_was_dropped_is_answered_again(api):
    run = api.start("deploy build 42 to staging", "deploy")
    drain()
    drop = Drop('FROM "approvals_pause"')
    with connection.execute_wrapper(drop):
        body = api.ok("/v1/pause/list", {"identity": {}})
    assert drop.dropped == 1
    assert [snapshot["run"] for snapshot in body["snapshots"]] == [run]


def test_a_start_whose_connection_was_dropped_is_answered_again_and_starts_one_run(api):
    drop = Drop('INSERT INTO "runs_run"')
    with connection.execute_wrapper(drop):
        started = api.ok("/v1/control/start", {"identity": {}, "query": "count to 2", "agent_id": "countdown"})
    assert drop.dropped == 1
    assert list(Run.objects.values_list("pk", flat=True)) == [started["task_id"]]
    assert started["reused"] is False
    assert Event.objects.filter(type="task.spawned").count() == 1


def test_a_connection_dropped_twice_is_answered_runtime_error_with_retry_after(api):
    drop = Drop('FROM "runs_run"', times=2)
    with connection.execute_wrapper(drop):
        answer = api.post("/v1/tasks/list", {"identity": {}})
    assert drop.dropped == 2
    assert answer.status_code == 500 and answer["Retry-After"] == "1"
    assert answer.json() == {"code": "runtime_error", "message": MESSAGE}


def test_a_stream_read_whose_connection_was_dropped_is_read_again(people_tx):
    drop = Drop("SELECT 1")
    with connection.execute_wrapper(drop):
        assert retry_once_if_lost(lambda: connection.cursor().execute("SELECT 1").fetchone()) == (1,)
    assert drop.dropped == 1


def test_a_refused_approval_whose_narrations_answer_was_lost_is_answered_refused_and_narrated_once(api):
    """The refusal rolled back; its narration (control.received, control.rejected) is a
    transaction of its own, whose answer is lost after it landed: the request is answered
    the refusal, and the narration is not written twice."""
    run = api.start("deploy build 42 to staging", "deploy")
    drain()
    body = {"identity": {"run": run}, "payload": {}}
    api.ok("/v1/control/approve", body, user="bob")
    fault = LoseConnection("during", wrote='INSERT INTO "runs_event"')
    with fault.armed():
        api.error("/v1/control/approve", body, user="bob", status=409, code="already_resumed")
    assert fault.struck is not None
    assert Event.objects.filter(run_id=run, type="pause.resumed").count() == 1
    assert Pause.objects.get(run_id=run).decision == "approve"
    assert Event.objects.filter(run_id=run, type="control.rejected").count() == 1
