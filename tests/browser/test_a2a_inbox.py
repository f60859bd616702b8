"""Alice's A2A story in a real browser: she starts a `trip` run, the live travel desk (a
remote A2A agent in its own process) asks which date she wants to fly, she answers from
the inbox, and the same remote task completes the run."""

import re

import pytest
from playwright.sync_api import expect

from approvals.a2a import bridge, wire
from approvals.a2a.directory import RemoteAgent
from tests.browser.test_inbox_and_console import LIVE, sign_in
from tests.travel_desk import travel_desk  # noqa: F401  (the live desk fixture)

pytestmark = pytest.mark.browser


def test_alice_answers_the_travel_desk_from_the_inbox(browser, live_harbor, travel_desk, screenshots):  # noqa: F811
    live_harbor.manage("a2a_remote_agent", "--tenant", "acme", "--name", "travel-desk", "--card-url", travel_desk.url)
    alice = sign_in(browser, live_harbor, "alice")

    alice.goto("/console/new/?agent=trip")
    alice.get_by_label("Query").fill("Book a flight to Lisbon")
    alice.get_by_role("button", name="Start").click()
    alice.wait_for_url(re.compile(r"/console/runs/(\w+)/"))
    started = re.search(r"/console/runs/(\w+)/", alice.url)
    assert started
    run_id = started.group(1)

    alice.goto("/inbox/")
    card = alice.locator(f"article[data-run='{run_id}']")
    expect(card).to_be_visible(timeout=LIVE)
    expect(card).to_contain_text("A remote agent asks a question")
    expect(card.locator("blockquote.question")).to_have_text("Which date do you want to fly?")
    expect(alice.locator("[data-open-count]")).to_have_text("1")  # counted, and no "nothing waits" beside it
    expect(alice.locator("[data-cards] [data-empty]")).to_have_count(0)
    alice.screenshot(path=str(screenshots / "a2a-inbox.png"), full_page=True)
    card.get_by_label("Your answer").fill("March 3")
    card.get_by_role("button", name="Send answer and resume").click()
    expect(alice.locator(".flash")).to_contain_text("Resumed the trip run")

    alice.goto(f"/console/runs/{run_id}/")
    answer = alice.locator("[data-answer]")
    expect(answer).to_contain_text("Booked a flight to Lisbon on March 3.", timeout=LIVE)
    timeline = alice.locator("[data-timeline]")
    expect(timeline).to_contain_text("a2a.input_required")
    expect(timeline).to_contain_text("tool.completed")

    # The remote agent itself holds one task, completed, with Alice's answer in its history.
    desk = RemoteAgent(name="check", card_url=travel_desk.url)
    booked = re.search(r"Reference (TD-\w+)", answer.inner_text())
    assert booked
    reference = booked.group(1)
    tasks = live_harbor.manage(
        "shell",
        "-c",
        (f"from approvals.models import Pause\nprint(Pause.objects.get(run_id={run_id!r}).payload['RemoteTaskID'])"),
    )
    task = bridge.call(wire.get(desk, tasks.strip().splitlines()[-1]))
    assert task.state == "completed" and reference in task.artifact
