"""The benchmark's own command runs (its figures are read by people, not asserted here)."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection


@pytest.mark.django_db(transaction=True)
def test_the_benchmark_prints_its_table(people_tx):
    out = StringIO()
    call_command("harbor_bench", "--rounds", "1", "--cycles", "2", "--history", "2", stdout=out)
    text = out.getvalue()
    for row in ("pause + decide cycles/s", "SQL statements per cycle", "approve service call", "pause.list page"):
        assert row in text, text
    if connection.vendor == "postgresql":  # where a cycle's time goes: four figures a side
        assert re.search(r"ours ((\d+\.\d|-) / ){3}\d+\.\d \(inline planner ((\d+\.\d|-) / ){3}\d+\.\d\)", text), text


@pytest.mark.django_db(transaction=True)
def test_the_http_rows_hold_streams_open_against_a_real_daphne(people_tx):
    out = StringIO()
    call_command("harbor_bench", "--latency-only", "--http", "--approvals", "2", "--stream-runs", "1", stdout=out)
    text = out.getvalue()
    assert "POST /v1/control/approve round trip" in text, text
    assert "with no run advancing beside it (the request alone)" in text and "ms of Daphne CPU each" in text, text
    assert "200 idle GET /v1/events streams on one Daphne: threads" in text, text
    assert "reaching 200 live GET /v1/events streams" in text, text


@pytest.mark.django_db(transaction=True)
def test_the_live_rows_time_pauses_on_sockets_of_a_real_daphne(people_tx):
    out = StringIO()
    call_command(
        "harbor_bench",
        *("--live", "--sockets", "3", "--live-pauses", "2", "--live-fanouts", "1"),
        *("--replays", "3", "--replay-events", "250"),
        stdout=out,
    )
    text = out.getvalue()
    assert "pause committed → frame on one connected inbox socket" in text, text
    assert "3 sockets: alone" in text, text
    assert re.search(r"while 3 sockets replay \d+ events .*\n.*during the replays .* replays done in", text), text
