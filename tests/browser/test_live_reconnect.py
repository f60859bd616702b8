"""The run page in a real browser against a live Daphne server keeps every event of a run,
once and in order, across a dropped websocket: it reconnects with ?after=<last sequence>."""

import json
import re
from urllib.parse import parse_qs, urlparse

import pytest

from .test_inbox_and_console import LIVE, sign_in, start_run

pytestmark = pytest.mark.browser


def run_sequences(live_harbor, run_id: str) -> list[int]:
    out = live_harbor.manage(
        "shell",
        "-c",
        (
            "import json\nfrom runs.models import Event\n"
            f"print(json.dumps(list(Event.objects.filter(run_id={run_id!r}).order_by('sequence')"
            ".values_list('sequence', flat=True))))"
        ),
    )
    return json.loads(out.strip().splitlines()[-1])


def test_the_run_page_misses_nothing_across_a_dropped_socket(browser, live_harbor):
    run_id = start_run(live_harbor, user="alice", agent_id="countdown", query="count to 60")
    olivia = sign_in(browser, live_harbor, "olivia")
    urls, routes = [], []

    def proxy(route):
        urls.append(route.url)
        routes.append(route)
        route.connect_to_server()

    olivia.route_web_socket(re.compile(r"/ws/events/"), proxy)
    olivia.goto(f"/console/runs/{run_id}/")
    timeline = olivia.locator("[data-timeline] li.new")
    timeline.nth(4).wait_for(timeout=LIVE)  # streaming live
    routes[0].close(code=1012)  # the socket drops, as in a server restart
    olivia.locator("[data-timeline] li[data-seq] code.type", has_text="task.completed").wait_for(timeout=60_000)

    shown = olivia.eval_on_selector_all("[data-timeline] li[data-seq]", "els => els.map(e => Number(e.dataset.seq))")
    assert shown == run_sequences(live_harbor, run_id)  # every event, once, in order
    assert len(urls) >= 2
    resumed_after = int(parse_qs(urlparse(urls[1]).query)["after"][0])
    assert resumed_after in shown[:-1]  # it asked for the events after the last one it had
    olivia.context.close()
