"""A /v1/ request whose database connection the server drops mid-way (a restart, a failover)
is answered again on a new connection, and applies once. One dropped during its COMMIT is
answered again if that applies it once anyway (a start, a control with an event_id); any
other asks PostgreSQL whether its transaction committed. PostgreSQL, its backends really
terminated."""

import threading

import psycopg
import pytest
from django.db import connection

from approvals.models import Pause, PauseState
from runs.domain import connection_loss
from runs.domain.services import steering_submit
from runs.identity.callers import caller_resolve
from runs.models import Event, Run, RunStatus
from runs.runtime.dispatch import drain
from tests.conftest import requires_postgres
from tests.dropped_connections import (
    commit_then_lose_the_answer,
    lone_statement_then_lose_the_answer,
    terminate_own_backend,
)

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


def _parked_deploy(api: Api) -> tuple[str, str]:
    run = api.start("deploy build 42 to staging", "deploy")
    drain()
    return run, Pause.objects.get(run_id=run).pk


def _decisions(run: str) -> list[str]:
    return list(Event.objects.filter(run_id=run, type="pause.resumed").values_list("type", flat=True))


def test_a_read_whose_connection_was_dropped_is_answered_again(api):
    run, _ = _parked_deploy(api)
    drop = Drop('FROM "approvals_pause"')
    with connection.execute_wrapper(drop):
        body = api.ok("/v1/pause/list", {"identity": {}})
    assert drop.dropped == 1
    assert [snapshot["run"] for snapshot in body["snapshots"]] == [run]


def test_a_start_whose_one_statement_was_dropped_is_answered_again_and_starts_one_run(api):
    """A start's writes go as one statement that commits itself, so losing its connection
    leaves unknown whether it did; the start chose its run's id before its first answer
    and looks for that run before making one."""
    drop = Drop('INSERT INTO "runs_run"')
    with connection.execute_wrapper(drop):
        started = api.ok("/v1/control/start", {"identity": {}, "query": "count to 2", "agent_id": "countdown"})
    assert drop.dropped == 1
    assert list(Run.objects.values_list("pk", flat=True)) == [started["task_id"]]
    assert started["reused"] is False


def test_a_start_whose_answer_was_lost_after_it_committed_answers_the_run_it_made(api):
    lost: list[str] = []

    def commit_then_lose(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if 'INSERT INTO "runs_run"' in sql and not lost:
            lost.append(sql)  # committed (a lone statement): the answer is lost on the way back
            terminate_own_backend()
            connection.cursor().execute("SELECT 1")  # the server is gone: a real loss, raised here
        return result

    with connection.execute_wrapper(commit_then_lose):
        started = api.ok("/v1/control/start", {"identity": {}, "query": "count to 2", "agent_id": "countdown"})
    assert lost
    assert list(Run.objects.values_list("pk", flat=True)) == [started["task_id"]]


def test_a_start_with_an_idempotency_key_whose_connection_was_dropped_starts_one_run(api):
    drop = Drop('INSERT INTO "runs_run"')
    body = {"identity": {}, "query": "count to 2", "agent_id": "countdown", "idempotency_key": "k-1"}
    with connection.execute_wrapper(drop):
        started = api.ok("/v1/control/start", body)
    assert drop.dropped == 1
    assert list(Run.objects.values_list("pk", flat=True)) == [started["task_id"]]
    assert api.ok("/v1/control/start", body) == {**started, "reused": True}


def test_an_approval_whose_connection_was_dropped_before_its_commit_lands_once(api):
    run, pause = _parked_deploy(api)
    drop = Drop('UPDATE "approvals_pause"')
    with connection.execute_wrapper(drop):
        api.ok("/v1/control/approve", {"identity": {"run": run}, "payload": {}})
    assert drop.dropped == 1
    assert Pause.objects.get(pk=pause).state == PauseState.RESUMED
    assert _decisions(run) == ["pause.resumed"]
    drain()
    assert Run.objects.get(pk=run).status == RunStatus.COMPLETE


def _drop_the_next_commit(monkeypatch) -> None:
    commit = connection.commit

    def dropped_commit() -> None:
        monkeypatch.undo()  # one COMMIT lost; the next request's are not
        terminate_own_backend()
        commit()

    monkeypatch.setattr(connection, "commit", dropped_commit)


def test_a_rejection_whose_commit_was_dropped_before_it_landed_is_answered_again_and_lands_once(api, monkeypatch):
    """The server asks PostgreSQL what became of the transaction: aborted, so it applies the
    rejection again on a new connection. (A rejection takes its locks and commits; an
    approval is one statement of its own, below.)"""
    run, pause = _parked_deploy(api)
    _drop_the_next_commit(monkeypatch)
    assert api.ok("/v1/control/reject", {"identity": {"run": run}, "payload": {}})["method"] == "reject"
    assert Pause.objects.get(pk=pause).state == PauseState.RESUMED
    assert _decisions(run) == ["pause.resumed"]
    assert Run.objects.get(pk=run).status == RunStatus.FAILED


def test_an_approval_whose_one_statement_landed_but_whose_answer_was_lost_is_answered_as_landed(api):
    """Its transaction's id never came back: what it wrote says it landed (the run carries
    the time it was written with). Answered 200 once, not applied again, and the run is
    carried on."""
    run, pause = _parked_deploy(api)
    lone_statement_then_lose_the_answer()
    assert api.ok("/v1/control/approve", {"identity": {"run": run}, "payload": {}})["method"] == "approve"
    assert Pause.objects.get(pk=pause).state == PauseState.RESUMED
    assert _decisions(run) == ["pause.resumed"]
    assert Event.objects.filter(run_id=run, type="control.applied").count() == 1
    drain()
    assert Run.objects.get(pk=run).status == RunStatus.COMPLETE


def test_an_approval_whose_commit_landed_but_whose_answer_was_lost_is_answered_as_landed(api):
    """Committed after all: answered 200 once, not applied again, and what the commit would
    have set off (the worker that carries the run on) still happens."""
    run, pause = _parked_deploy(api)
    commit_then_lose_the_answer()
    assert api.ok("/v1/control/approve", {"identity": {"run": run}, "payload": {}})["method"] == "approve"
    assert Pause.objects.get(pk=pause).state == PauseState.RESUMED
    assert _decisions(run) == ["pause.resumed"]
    assert list(Event.objects.filter(run_id=run, type="control.applied").values_list("type", flat=True)) == [
        "control.applied"
    ]
    drain()
    assert Run.objects.get(pk=run).status == RunStatus.COMPLETE


def test_a_commit_whose_transaction_is_still_in_progress_is_left_in_doubt(people_tx):
    """A server that has not noticed the loss yet holds the transaction open: its outcome
    cannot be learned in time, and the request says it may have taken effect."""
    params = {k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    with psycopg.connect(**params) as other:
        xid = other.execute("SELECT pg_current_xact_id()::text").fetchone()[0]  # type: ignore[index]
        connection.commit_in_doubt = True  # type: ignore[attr-defined]  # as harbor_site.postgresql does
        connection.doubted_transaction = xid  # type: ignore[attr-defined]
        assert connection_loss.commit_outcome(timeout=0.2) is None
        other.rollback()
    assert connection_loss.commit_outcome() == "aborted"


def test_a_landed_approval_is_answered_as_landed_though_its_run_was_written_again_meanwhile(api, monkeypatch):
    """Before what landed is asked, another writer (a prioritize) rewrites the run: the
    approval's mark is its first event, which nothing rewrites, not the run's updated_at."""
    run, pause = _parked_deploy(api)
    ended = connection_loss._ended

    def rewritten_first(pid, started):
        caller = caller_resolve(tenant="acme", user="ada", session="s1")
        writer = threading.Thread(
            target=lambda: steering_submit(caller=caller, run_id=run, method="prioritize", payload={"priority": 3})
        )
        writer.start()
        writer.join()
        return ended(pid, started)

    monkeypatch.setattr(connection_loss, "_ended", rewritten_first)
    lone_statement_then_lose_the_answer()
    assert api.ok("/v1/control/approve", {"identity": {"run": run}, "payload": {}})["method"] == "approve"
    assert Run.objects.get(pk=run).priority == 3
    assert _decisions(run) == ["pause.resumed"]


def test_a_refused_approval_whose_narrations_answer_was_lost_is_answered_refused(api):
    """The refusal rolled back, and its narration (control.received, control.rejected) is a
    transaction of its own: that its COMMIT landed is not the approval's outcome, which
    stays the refusal (it was answered 200, as if the approval had applied)."""
    run, pause = _parked_deploy(api)
    api.ok("/v1/control/approve", {"identity": {"run": run}, "payload": {}})
    commit_then_lose_the_answer()
    api.error("/v1/control/approve", {"identity": {"run": run}, "payload": {}}, status=409, code="already_resumed")
    assert _decisions(run) == ["pause.resumed"]


def test_a_lone_statement_whose_answer_was_lost_is_judged_once_its_server_process_is_gone(people_tx):
    """That process may still be running the statement (it was on its way over a half-dead
    link): it is ended first, so "it did not land" cannot be overtaken by its landing."""
    params = {k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    with psycopg.connect(**params, autocommit=True) as other:  # the process that ran it
        backend = other.execute(
            "SELECT pg_backend_pid(), backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchone()
        assert backend is not None
        still_there: list[bool] = []

        def landed() -> bool:
            with connection.cursor() as cursor:
                cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)", [backend[0]])
                still_there.append(cursor.fetchone()[0])
            return False

        connection.commit_in_doubt = True  # type: ignore[attr-defined]  # as runs.domain.rows.alone does
        connection.doubted_transaction, connection.doubted_hooks = None, []  # type: ignore[attr-defined]
        connection.doubted_landed, connection.doubted_backend = landed, backend  # type: ignore[attr-defined]
        assert connection_loss.what_landed() == "aborted"
        assert still_there == [False]
        with pytest.raises(psycopg.OperationalError):
            other.execute("SELECT 1")


def test_a_decision_with_an_event_id_whose_commit_was_dropped_is_answered_again_and_lands_once(api, monkeypatch):
    run, pause = _parked_deploy(api)
    _drop_the_next_commit(monkeypatch)
    body = {"identity": {"run": run}, "payload": {}, "event_id": "reject-1"}
    api.ok("/v1/control/reject", body)  # answering it again applies it once, whether it had landed or not
    api.ok("/v1/control/reject", body)
    assert Pause.objects.get(pk=pause).state == PauseState.RESUMED
    assert _decisions(run) == ["pause.resumed"]


def test_a_connection_dropped_twice_is_answered_runtime_error(api):
    drop = Drop('FROM "runs_run"', times=2)
    with connection.execute_wrapper(drop):
        answer = api.post("/v1/tasks/list", {"identity": {}})
    assert drop.dropped == 2
    assert answer.status_code == 500
    assert answer.json() == {"code": "runtime_error", "message": "the database connection was lost; try again"}


def test_a_stream_read_whose_connection_was_dropped_is_read_again(people_tx):
    drop = Drop("SELECT 1")
    with connection.execute_wrapper(drop):
        assert connection_loss.once_more_if_lost(lambda: connection.cursor().execute("SELECT 1").fetchone()) == (1,)
    assert drop.dropped == 1
