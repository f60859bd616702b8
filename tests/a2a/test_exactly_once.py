"""A remote call is a long tool call: it must never be sent twice, and the remote task's
address in the tool context lets any worker, in any process, go on with the same task."""

import os
import subprocess

import pytest
from django.db import connection

from approvals.a2a import bridge, wire
from approvals.a2a.delegate import delegate
from approvals.a2a.directory import RemoteAgent
from runs.models import Run, RunStatus, ToolCall
from runs.runtime.dispatch import drain
from runs.runtime.tools import ToolContext, ToolPause
from tests.a2a.helpers import configure, payloads, remote, start, steer
from tests.live import PYTHON, ROOT


def worker_database() -> dict:
    """The environment of a second worker process on this test's database."""
    db = connection.settings_dict
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "HARBOR_TEST_DB")}
    if connection.vendor == "postgresql":
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    else:
        env["HARBOR_SQLITE_PATH"] = str(db["NAME"])
    return env


def attempt(run: Run, saved: dict | None, resumed: dict | None = None) -> ToolContext:
    """A fresh attempt of the run's pending call, as a retry after a crash sees it: the
    context as last checkpointed, the same idempotency key."""
    ctx = ToolContext.restore(run.pk, saved)
    ctx.idempotency_key, ctx.resumed = f"{run.pk}:0", resumed
    return ctx


def test_an_attempt_that_died_after_sending_is_followed_not_sent_again(people_tx, travel_desk):
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Vienna")
    args = {"agent": "travel-desk", "request": "Book a flight to Vienna"}

    with pytest.raises(ToolPause) as first:
        delegate(args, attempt(run, None))  # sent; the worker then dies before recording anything
    with pytest.raises(ToolPause) as retry:
        delegate(args, attempt(run, None))  # the retry starts from the same (empty) checkpoint
    task_id = first.value.payload["RemoteTaskID"]
    assert retry.value.payload["RemoteTaskID"] == task_id
    desk = RemoteAgent(name="check", card_url=travel_desk.url)
    in_context = bridge.call(wire.find_in_context(desk, first.value.payload["ContextID"]))
    assert (
        in_context is not None and in_context.task_id == task_id and len(in_context.message_ids) == 2
    )  # one request, one question

    # The answer, too, goes once: a retry of the resumed attempt finds it in the task's history.
    saved = {
        "state": {
            "a2a": {
                "call": f"{run.pk}:0",
                "agent": "travel-desk",
                "card_url": travel_desk.url,
                "context_id": first.value.payload["ContextID"],
                "task_id": task_id,
                "waiting": "input",
            }
        },
        "handles": {},
    }
    resolution = {"pause": "p1", "decision": "resume", "input": "March 3"}
    done = delegate(args, attempt(run, saved, resolution))
    again = delegate(args, attempt(run, saved, resolution))
    assert done["RemoteTaskID"] == again["RemoteTaskID"] == task_id and done["Artifact"] == again["Artifact"]
    history = remote(travel_desk.url, task_id)
    assert history.state == "completed" and len(history.message_ids) == 5  # request, question, answer, working, done


def test_a_resume_on_another_worker_process_goes_on_with_the_same_remote_task(people_tx, travel_desk):
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Dakar")
    drain()  # this process parks the run
    asked = payloads(run, "a2a.input_required")[0]
    steer(people_tx, run, "resume", {"input": "April 9"})

    env = {**worker_database(), "HARBOR_EXECUTOR": "manual"}
    code = "import os\nfrom runs.runtime.dispatch import drain\nprint(drain(), os.getpid())"
    out = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    advanced, pid = out.stdout.split()[-2:]
    assert int(advanced) >= 1 and int(pid) != os.getpid()  # the steps it took

    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and "Dakar on April 9" in run.answer
    completed = payloads(run, "tool.completed")[-1]
    assert (completed["RemoteTaskID"], completed["ContextID"]) == (asked["RemoteTaskID"], asked["ContextID"])
    workers = list(ToolCall.objects.filter(run=run).order_by("attempt").values_list("worker", flat=True))
    assert len(workers) == 2 and workers[0] != workers[1]
    assert remote(travel_desk.url, asked["RemoteTaskID"]).state == "completed"
