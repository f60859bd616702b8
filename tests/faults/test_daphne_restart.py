"""A Daphne process dies under a connected SSE client: the client reconnects with
Last-Event-ID and sees every event once, in order, including those committed while no
web process was there to push them."""

import time

from tests.conftest import requires_postgres, requires_redis

from .client import SseFollower, event_head, event_log, runs_status, start_run, wait_runs

pytestmark = [requires_postgres, requires_redis]


def test_an_sse_client_resumes_after_a_daphne_restart_with_every_event_once_in_order(topology):
    head = event_head(topology)
    stream = SseFollower(topology.url(0), topology.token(), cursor=head)
    stream.start()
    stream.wait_connected()
    with topology.api(1) as api:  # control goes through the other process, which stays up
        runs = [start_run(api, "count to 20", "countdown") for _ in range(3)]
    mine = set(runs)
    try:
        assert stream.wait_for(lambda got: sum(e["run"] in mine for e in got) >= 10), "no live events before the kill"
        topology.kill("daphne0")
        head_at_kill = event_head(topology)
        while event_head(topology) < head_at_kill + 10:  # events keep committing while it is down
            assert not all(s == "complete" for s in runs_status(topology, runs).values()), "runs ended too soon"
            time.sleep(0.1)
        head_at_restart = event_head(topology)
        topology.start_process("daphne0")
        wait_runs(topology, runs, "complete", timeout=90)
        assert stream.wait_for(
            lambda got: sum(e["type"] == "task.completed" and e["run"] in mine for e in got) == len(runs), timeout=30
        ), f"the stream did not catch up: {stream.breaks[-3:]}"
    finally:
        stream.stop()

    assert stream.connections >= 2, "the client never had to reconnect: the kill did not break the stream"
    expected = [sequence for sequence, _, _ in event_log(topology, runs, after=head)]
    got = stream.sequences(mine)
    assert any(head_at_kill < s <= head_at_restart for s in expected), "nothing was committed while Daphne was down"
    assert not stream.malformed, stream.malformed[:3]
    missing, duplicated = sorted(set(expected) - set(got)), sorted({s for s in got if got.count(s) > 1})
    assert not missing and not duplicated, f"missing {missing[:20]}, duplicated {duplicated[:20]}"
    assert got == expected, "events out of order"
    everything = stream.sequences()
    assert everything == sorted(set(everything)), "the whole stream is not strictly increasing"
