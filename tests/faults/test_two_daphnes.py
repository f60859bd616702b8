"""Two Daphne processes behind one Redis: the live push crosses processes, and a decision
sent through both at once lands once."""

import threading

import httpx

from tests.conftest import requires_postgres, requires_redis

from .client import WsFollower, approve, event_head, event_log, start_run, wait_runs

pytestmark = [requires_postgres, requires_redis]


def test_a_pause_started_through_one_daphne_reaches_an_inbox_on_the_other_and_is_decided_once(topology):
    head = event_head(topology)
    inbox = WsFollower(topology.url(1), topology.login_cookies("bob", index=1), cursor=head)  # the approver's inbox
    inbox.start()
    inbox.wait_connected()
    alice = topology.api(0)
    bob = [topology.api(0, "bob", "inbox"), topology.api(1, "bob", "inbox")]
    runs = []
    try:
        for attempt in range(4):  # a few races, with the run started through either process
            run = start_run(topology.api(attempt % 2), "deploy build 7.1 to staging", "deploy")
            runs.append(run)

            def requested(got):
                return next((e for e in got if e["run"] == run and e["type"] == "pause.requested"), None)

            assert inbox.wait_for(requested), f"pause.requested of {run} never reached the inbox on the other Daphne"
            token = requested(inbox.received)["payload"]["Token"]
            assert token, "the approver's inbox must carry the resume token"

            # The same decision through both processes at once.
            barrier = threading.Barrier(2)
            answers: list[httpx.Response | None] = [None, None]

            def decide(index: int) -> None:
                barrier.wait()
                answers[index] = approve(bob[index], run, token)

            threads = [threading.Thread(target=decide, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert all(answers), answers
            outcome = sorted((r.status_code, r.json().get("code")) for r in answers if r)
            assert outcome == [(200, None), (409, "already_resumed")], outcome

        wait_runs(topology, runs, "complete", timeout=60)
    finally:
        inbox.stop()
        alice.close()
        [client.close() for client in bob]

    decided = topology.sql(
        "SELECT run_id, state, decision, decided_by_id IS NOT NULL FROM approvals_pause WHERE run_id = ANY(%s)", (runs,)
    )
    assert sorted(row[0] for row in decided) == sorted(runs), "one pause per run"
    assert {row[1:] for row in decided} == {("resumed", "approve", True)}
    log = event_log(topology, runs)
    for run in runs:
        types = [t for _, t, r in log if r == run]
        assert types.count("pause.resumed") == 1 and types.count("tool.approved") == 1, types
        assert types.count("task.completed") == 1, types
