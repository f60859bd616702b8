"""Runs advanced by the real topology behind a live server: worker threads inside Daphne
on the embedded default; a Celery worker (with beat) on PostgreSQL and Redis."""

import json
import time

SHELL = """
import json
from runs.identity.callers import caller_resolve
from runs.models import Run
from runs.application import run_start, steering_submit
{body}
"""


def in_server(live_harbor, body: str):
    return json.loads(live_harbor.manage("shell", "-c", SHELL.format(body=body)).strip().splitlines()[-1])


def wait_status(live_harbor, run_id: str, wanted: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = in_server(
            live_harbor,
            f"r = Run.objects.get(pk={run_id!r}); print(json.dumps({{'status': r.status, 'answer': r.answer}}))",
        )
        if row["status"] == wanted:
            return row
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} did not reach {wanted}")


def test_a_deploy_run_parks_is_approved_by_a_delegate_and_completes(live_harbor):
    run_id = in_server(
        live_harbor,
        "a = caller_resolve(tenant='acme', user='alice', session='s1'); "
        "print(json.dumps(run_start(caller=a, query='deploy build 3.1 to staging', "
        "agent_id='deploy')[0].pk))",
    )
    wait_status(live_harbor, run_id, "paused")
    in_server(
        live_harbor,
        "b = caller_resolve(tenant='acme', user='bob', session='web'); "
        f"steering_submit(caller=b, run_id={run_id!r}, method='approve', "
        "payload={'args': {'environment': 'production'}}); print('1')",
    )
    # The edit brought acme's production rule: a second release manager approves.
    in_server(
        live_harbor,
        "c = caller_resolve(tenant='acme', user='carol', session='web'); "
        f"steering_submit(caller=c, run_id={run_id!r}, method='approve'); print('1')",
    )
    done = wait_status(live_harbor, run_id, "complete")
    assert done["answer"] == "Deployed build 3.1 to production."
