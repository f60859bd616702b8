"""The run page in a real browser against a live Daphne server keeps every event of a run,
once and in order, across a dropped websocket: it reconnects with ?after=<last sequence>."""

import json
import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import expect

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


def proxied_sockets(page) -> list:
    """The page's event sockets, passed through to the server: each route, to send a
    frame of the test's own down it."""
    routes: list = []

    def proxy(route):
        routes.append(route)
        route.connect_to_server()

    page.route_web_socket(re.compile(r"/ws/events/"), proxy)
    return routes


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


def test_a_frame_the_page_cannot_read_makes_it_say_so_and_reload(browser, live_harbor):
    """Never "live" while what arrives is not shown: an unreadable frame (a frame cut by a
    proxy, say) closes the socket, says the page is out of date, and reloads it once."""
    run_id = start_run(live_harbor, user="alice", agent_id="countdown", query="count to 2")
    olivia = sign_in(browser, live_harbor, "olivia")
    routes = proxied_sockets(olivia)
    olivia.goto(f"/console/runs/{run_id}/")
    indicator = olivia.locator("[data-live-indicator]")
    expect(indicator).to_have_text("live", timeout=LIVE)
    olivia.evaluate("window.__harborNoReload = true")
    with olivia.expect_navigation(timeout=LIVE):
        routes[-1].send('{"type": "tool.completed", "sequence": 99, "payload": {"Result": "cut sho')
    assert not olivia.evaluate("window.__harborNoReload === true")
    expect(indicator).to_have_text("live", timeout=LIVE)  # reloaded, and live again
    # Failing again at once, it stops at saying so rather than reload in a loop.
    olivia.evaluate("window.__harborNoReload = true")
    routes[-1].send("not json at all")
    expect(indicator).to_have_text("out of date: reload", timeout=LIVE)
    assert olivia.evaluate("window.__harborNoReload === true")
    olivia.context.close()


def test_the_run_page_shows_bidi_controls_of_a_live_event_not_obeys_them(browser, live_harbor):
    run_id = start_run(live_harbor, user="alice", agent_id="countdown", query="count to 2")
    olivia = sign_in(browser, live_harbor, "olivia")
    routes = proxied_sockets(olivia)
    olivia.goto(f"/console/runs/{run_id}/")
    expect(olivia.locator("[data-live-indicator]")).to_have_text("live", timeout=LIVE)
    frame = {
        "type": "message.received",
        "sequence": 10**9,
        "occurred_at": "2026-12-07T10:00:00Z",
        "tenant": "acme",
        "user": "alice",
        "session": "cli",
        "run": run_id,
        "payload": {"Message": "ship to staging\u202enoitcudorp"},
    }
    routes[-1].send(json.dumps(frame))
    shown = olivia.locator(f'[data-timeline] li[data-seq="{10**9}"] .summary')
    expect(shown).to_have_text("Message: ship to staging[U+202E]noitcudorp", timeout=LIVE)
    olivia.context.close()
