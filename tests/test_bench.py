"""The benchmarks run (their figures are read by people, not asserted here): a smoke run of
each part with tiny sizes."""

import re
from io import StringIO

import pytest
from django.db import connection

from bench.cli import main
from runs.models import Run, RunStatus


def bench(*argv: str) -> str:
    out = StringIO()
    assert main(list(argv), stdout=out, stderr=StringIO()) == 0, out.getvalue()
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_the_benchmark_prints_its_table(people_tx):
    text = bench("--rounds", "1", "--cycles", "4", "--gates", "2", "--history", "2", "--no-ceiling")
    for row in ("pause + decide cycles/s", "statements per cycle", "pause.list page", "/inbox/ for an approver"):
        assert row in text, text
    assert re.search(r"ours +\d+\.\d / \d+\.\d / \d+\.\d", text), text
    if connection.vendor == "postgresql":  # where a cycle's time goes: four figures a side
        assert re.search(r"round trips to PostgreSQL per cycle: ours \d+", text), text
        assert re.search(r"ours ((\d+\.\d|-) / ){3}\d+\.\d", text), text


@pytest.mark.django_db(transaction=True)
def test_a_round_decides_every_gate_of_its_runs(people_tx):
    from bench.cycles import ours_round

    ours_round(6, 3)
    runs = Run.objects.filter(agent_id="bench_gates_3")
    assert runs.count() == 2
    assert set(runs.values_list("status", flat=True)) == {RunStatus.COMPLETE}


@pytest.mark.django_db(transaction=True)
def test_the_http_rows_hold_streams_open_against_a_real_daphne(people_tx):
    text = bench("--latency-only", "--http", "--approvals", "2", "--stream-runs", "1")
    assert "POST /v1/control/approve round trip" in text, text
    assert "with no run advancing beside it (the request alone)" in text and "ms of Daphne CPU each" in text, text
    assert "200 idle GET /v1/events streams on one Daphne: threads" in text, text
    assert "reaching 200 live GET /v1/events streams" in text, text


@pytest.mark.django_db(transaction=True)
def test_the_live_rows_time_pauses_on_sockets_of_a_real_daphne(people_tx):
    text = bench(
        *("--live", "--sockets", "3", "--live-pauses", "2", "--live-fanouts", "1"),
        *("--replays", "3", "--replay-events", "250"),
    )
    assert "pause committed → frame on one connected inbox socket" in text, text
    assert "3 sockets: alone" in text, text
    assert re.search(r"while 3 sockets replay \d+ events .*\n.*during the replays .* replays done in", text), text
