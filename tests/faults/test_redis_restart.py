"""Redis (channel layer and Celery broker) restarts mid-run, losing everything it held.
The database is the source of truth: no decision is lost, every run completes, and an
inbox socket that reconnects with ?after=<last sequence> has every event with no gap."""

import time

from tests.conftest import requires_postgres, requires_redis

from .client import (
    WsFollower,
    approve_until_answered,
    decision_landed,
    event_head,
    event_log,
    start_run,
    wait_open_pauses,
    wait_runs,
)

pytestmark = [requires_postgres, requires_redis]


def test_a_redis_restart_loses_no_decision_and_no_event(topology):
    head = event_head(topology)
    inbox = WsFollower(topology.url(0), topology.login_cookies("alice"), cursor=head)
    inbox.start()
    inbox.wait_connected()
    api = topology.api(0)
    runs = [start_run(api, f"deploy build 9.{i} to staging", "deploy") for i in range(4)]
    mine = set(runs)
    try:
        tokens = {p["run"]: p["token"] for p in wait_open_pauses(api, runs, count=len(runs))}
        answers = {}
        answers[runs[0]] = approve_until_answered(api, runs[0], tokens[runs[0]])  # before
        topology.kill("redis")
        answers[runs[1]] = approve_until_answered(api, runs[1], tokens[runs[1]])  # while Redis is down
        time.sleep(1)
        topology.start_process("redis")  # empty: no groups, no queued tasks
        answers[runs[2]] = approve_until_answered(api, runs[2], tokens[runs[2]])  # just after
        time.sleep(2)
        answers[runs[3]] = approve_until_answered(api, runs[3], tokens[runs[3]])  # once things settled

        # Gather every violation before failing, so one run reports them all.
        problems = []
        lost = {run: a for run, a in answers.items() if not decision_landed(a)}
        if lost:
            problems.append(f"decisions not acknowledged (200, or retryable then 200/409): {lost}")
        unclear = {
            run: a
            for run, a in answers.items()
            if any(status not in (200, 409, 429, 502, 503, 504, "transport") for status, _ in a)
        }
        if unclear:
            problems.append(f"answers that are neither success nor a retryable error: {unclear}")
        try:
            wait_runs(topology, runs, "complete", timeout=60)
        except AssertionError as error:
            problems.append(str(error))
        done = inbox.wait_for(
            lambda got: sum(e["type"] == "task.completed" and e["run"] in mine for e in got) == len(runs), timeout=20
        )
    finally:
        inbox.stop()
        api.close()

    pauses = topology.sql("SELECT run_id, state, decision FROM approvals_pause WHERE run_id = ANY(%s)", (runs,))
    if sorted(pauses) != sorted((run, "resumed", "approve") for run in runs):
        problems.append(f"pauses not all decided approve, once: {pauses}")
    log = event_log(topology, runs, after=head)
    expected = [sequence for sequence, _, _ in log]
    got = inbox.sequences(mine)
    missing = [(sequence, kind) for sequence, kind, _ in log if sequence not in set(got)]
    if not done or missing:
        problems.append(
            f"the inbox missed {len(missing)} of {len(expected)} events {missing[:20]} (connections "
            f"{inbox.connections}, closes {inbox.close_codes}, breaks {inbox.breaks[-3:]})"
        )
    if len(got) != len(set(got)):
        problems.append("the inbox got an event twice")
    elif not missing and got != expected:
        first = next(i for i, (a, b) in enumerate(zip(got, got[1:])) if a > b)
        problems.append(
            f"the inbox got events out of order: ...{got[max(0, first - 2) : first + 3]}... "
            "(a client resuming with ?after=<last sequence> would skip the earlier ones)"
        )
    assert not problems, "\n".join(problems)
