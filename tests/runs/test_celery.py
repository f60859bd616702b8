"""The production topology: a real Celery worker process on Redis advances runs, and a
dispatch task delivered twice never executes a step twice."""

import subprocess
import sys
import time

import pytest
from django.db import connection
from django.test import override_settings

from runs.application import run_start
from runs.models import Run, RunStatus
from runs.tasks import dispatch
from tests.conftest import requires_postgres, requires_redis
from tests.runs.test_runtime import _worker_env

pytestmark = [requires_postgres, requires_redis, pytest.mark.redis, pytest.mark.django_db(transaction=True)]
WORKER_APP = "harbor-test-celery-worker"  # the worker's application_name in pg_stat_activity


@pytest.fixture
def celery_worker(tmp_path):
    env = _worker_env()
    env.update(HARBOR_EXECUTOR="celery", HARBOR_TICK_SECONDS="0.05", HARBOR_SWEEP_SECONDS="1", PGAPPNAME=WORKER_APP)
    log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "harbor_site",
            "worker",
            "--concurrency",
            "2",
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "-n",
            f"test-{time.monotonic_ns()}@%h",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    dispatch.app.control.purge()
    yield worker
    worker.terminate()
    worker.wait(timeout=20)
    log.close()


def wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_a_dispatch_task_delivered_twice_does_not_execute_a_step_twice(people_tx, celery_worker):
    with override_settings(HARBOR_EXECUTOR="celery"):
        runs = [
            run_start(caller=people_tx.caller("alice"), query="count to 6", agent_id="countdown")[0] for _ in range(2)
        ]  # each start sends a dispatch task on commit
    for _ in range(3):
        dispatch.delay()  # duplicate deliveries
    wait_for(lambda: Run.objects.filter(pk__in=[r.pk for r in runs], status=RunStatus.COMPLETE).count() == 2)
    for run in runs:
        run.refresh_from_db()
        assert [e["args"]["n"] for e in run.checkpoint["history"]] == [1, 2, 3, 4, 5, 6]
        assert run.events.filter(type="tool.invoked").count() == 6
        assert run.events.filter(type="task.started").count() == 1


def _worker_connections() -> set[tuple[int, object]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, backend_start FROM pg_stat_activity WHERE application_name = %s", [WORKER_APP])
        return set(cursor.fetchall())


def test_a_worker_process_keeps_its_database_connection_from_task_to_task(people_tx, celery_worker):
    """Celery's Django fixup would close a prefork child's connection pool around every task,
    so each wake-up paid a new PostgreSQL connection; the child keeps its pool instead."""

    def finish_one() -> None:
        with override_settings(HARBOR_EXECUTOR="celery"):
            run, _ = run_start(caller=people_tx.caller("alice"), query="count to 1", agent_id="countdown")
        wait_for(lambda: Run.objects.filter(pk=run.pk, status=RunStatus.COMPLETE).exists())

    finish_one()
    wait_for(lambda: bool(_worker_connections()))
    before = _worker_connections()
    for _ in range(4):
        finish_one()
    assert before & _worker_connections(), "every connection the worker had before was closed"
