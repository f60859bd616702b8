"""The inbox and the console in a real browser against a live Daphne server: an approver
decides a gate that appears live, an operator steers a live run, and another tenant sees
none of it. Runs are started through the protocol, like any client would."""

import json
import re
import time

import httpx
import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

LIVE = 20_000  # ms: how long a live update may take to show


def sign_in(browser, live_harbor, username: str, password: str | None = None) -> Page:
    """Sign in through the page: a demo login's password, unless given."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_harbor.url)
    context.set_default_timeout(LIVE)
    page = context.new_page()
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password or live_harbor.logins[username])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/(inbox|console)/"))
    return page


def start_run(live_harbor, *, user: str, agent_id: str, query: str) -> str:
    """Start a run as `user` through POST /v1/control/start with a minted bearer token;
    where this deployment trusts no development key (production), through the service."""
    try:
        token = live_harbor.manage("harbor_token", "--tenant", "acme", "--user", user, "--session", "cli").strip()
    except RuntimeError:
        token = None
    if token:
        response = httpx.post(
            f"{live_harbor.url}/v1/control/start",
            json={"identity": {}, "query": query, "agent_id": agent_id},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        if response.status_code == 200:
            return response.json()["task_id"]
    out = live_harbor.manage(
        "shell",
        "-c",
        (
            "import json\nfrom runs.identity.callers import caller_resolve\nfrom runs.application import run_start\n"
            f"c = caller_resolve(tenant='acme', user={user!r}, session='cli')\n"
            f"print(json.dumps(run_start(caller=c, query={query!r}, agent_id={agent_id!r})[0].pk))"
        ),
    )
    return json.loads(out.strip().splitlines()[-1])


def approve_elsewhere(live_harbor, *, user: str, run_id: str) -> None:
    """Another approver decides, through POST /v1/control/approve (or the service)."""
    try:
        token = live_harbor.manage("harbor_token", "--tenant", "acme", "--user", user, "--session", "cli").strip()
    except RuntimeError:
        token = None
    if token:
        response = httpx.post(
            f"{live_harbor.url}/v1/control/approve",
            json={"identity": {"run": run_id}, "payload": {}},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return
    live_harbor.manage(
        "shell",
        "-c",
        (
            "from runs.identity.callers import caller_resolve\nfrom runs.application import steering_submit\n"
            f"steering_submit(caller=caller_resolve(tenant='acme', user={user!r}, session='cli'), run_id={run_id!r}, method='approve')"
        ),
    )


def no_reload_marker(page: Page) -> None:
    page.evaluate("window.__harborNoReload = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__harborNoReload === true"), "the page was reloaded"


def test_inbox_and_console_live(browser, live_harbor, screenshots):
    started = time.monotonic()

    # --- bob, an approver, waits in his inbox; alice starts a deploy through the protocol ---
    bob = sign_in(browser, live_harbor, "bob")
    assert bob.url.endswith("/inbox/")
    expect(bob.locator("[data-live-indicator]")).to_have_text("live")
    no_reload_marker(bob)
    deploy = start_run(live_harbor, user="alice", agent_id="deploy", query="deploy build 42 to production")
    card = bob.locator(f"article[data-run='{deploy}']")
    expect(card).to_be_visible()
    assert_not_reloaded(bob)
    expect(card).to_contain_text("deploy_to_production")
    expect(card).to_contain_text("deploying changes production")
    expect(card).to_contain_text("alice")

    # --- a build name the tool does not take: the browser holds it back, the server too ---
    card.get_by_text("Edit arguments").click()
    build = card.get_by_label("build")
    build.fill("not-a-build; rm -rf /")
    assert build.evaluate("input => input.validity.patternMismatch")
    card.locator("[data-approve-form]").evaluate("form => { form.noValidate = true; }")
    card.get_by_role("button", name="Approve with 1 edit").click()
    card = bob.locator(f"article[data-run='{deploy}']")
    expect(card.locator("[data-field-error='build']")).to_contain_text("not a build name")
    expect(card.get_by_label("build")).to_have_value("not-a-build; rm -rf /")
    card.get_by_label("build").fill("42")

    # --- he edits the environment, sees the diff, and approves; carol's approval completes it ---
    card.get_by_label("environment").select_option("staging")
    expect(card.locator("[data-diff]")).to_contain_text("- environment: production")
    expect(card.locator("[data-diff]")).to_contain_text("+ environment: staging")
    card.get_by_text("Reject…").click()  # the terminal choice asks for confirmation
    expect(card.get_by_role("button", name="Yes, reject for good")).to_be_visible()
    card.get_by_text("Reject…").click()
    bob.screenshot(path=str(screenshots / "inbox.png"), full_page=True)
    card.get_by_role("button", name="Approve with 1 edit").click()
    # acme's policy: a production deploy needs two release managers, so the gate waits for carol.
    expect(bob.locator(".flash")).to_contain_text("1 of 2 approvals: bob")
    expect(card.locator("[data-tally]")).to_contain_text("production deploys: 1 of 2 approvals: bob")
    no_reload_marker(bob)
    approve_elsewhere(live_harbor, user="carol", run_id=deploy)  # the arguments bob approved, edited
    expect(bob.locator(f"article[data-run='{deploy}']")).to_have_count(0)
    expect(bob.locator("[data-toasts]")).to_contain_text("decided elsewhere by carol (approve)")

    # --- a pause decided by someone else leaves his inbox by itself, with a note ---
    no_reload_marker(bob)
    other = start_run(live_harbor, user="alice", agent_id="deploy", query="deploy build 43 to staging")
    expect(bob.locator(f"article[data-run='{other}']")).to_be_visible()
    approve_elsewhere(live_harbor, user="admin", run_id=other)
    expect(bob.locator(f"article[data-run='{other}']")).to_have_count(0)
    expect(bob.locator("[data-toasts]")).to_contain_text("decided elsewhere by admin (approve)")
    expect(bob.locator("[data-empty]")).to_be_visible()
    assert_not_reloaded(bob)

    # --- the run completes; the console shows the edited answer ---
    olivia = sign_in(browser, live_harbor, "olivia")
    assert olivia.url.endswith("/console/")
    olivia.goto(f"/console/runs/{deploy}/")
    expect(olivia.locator("[data-answer]")).to_have_text("Deployed build 42 to staging.")
    expect(olivia.locator("[data-timeline]")).to_contain_text("tool.approved")

    # --- olivia, an operator, pauses a live countdown, redirects it, resumes it ---
    olivia.goto("/console/")
    no_reload_marker(olivia)
    count = start_run(live_harbor, user="alice", agent_id="countdown", query="count to 60")
    row = olivia.locator(f"tr[data-run='{count}']")
    expect(row).to_be_visible()  # appears in the list without a reload
    expect(row.locator(".badge").first).to_have_text("running")
    assert_not_reloaded(olivia)
    olivia.screenshot(path=str(screenshots / "console.png"), full_page=True)
    row.get_by_role("link").click()
    olivia.wait_for_url(f"**/console/runs/{count}/")
    expect(olivia.locator("[data-timeline]")).to_contain_text("tool.completed")  # ticking live
    olivia.get_by_role("button", name="Pause run").click()
    expect(olivia.locator(".flash")).to_contain_text("Pause sent")
    status = olivia.locator("[data-run-status]")
    expect(status).to_have_attribute("data-run-status", "paused")
    expect(olivia.locator("[data-region='pause']")).to_contain_text("operator")
    olivia.get_by_role("textbox", name="New goal").fill("count to 60, then report to the harbour master")
    olivia.get_by_role("button", name="Redirect").click()
    expect(olivia.locator(".flash")).to_contain_text("Redirect sent")
    olivia.get_by_role("textbox", name="Message", exact=True).fill("nearly there")
    olivia.get_by_role("button", name="Send").click()
    olivia.screenshot(path=str(screenshots / "console-run.png"), full_page=True)
    olivia.get_by_role("button", name="Resume run").click()
    expect(olivia.locator(".flash")).to_contain_text("Resumed")
    no_reload_marker(olivia)
    expect(olivia.locator("[data-goal]")).to_have_text("count to 60, then report to the harbour master")
    expect(status).to_have_attribute("data-run-status", "complete", timeout=90_000)  # watched live to the end
    assert_not_reloaded(olivia)
    answer = olivia.locator("[data-answer]")
    expect(answer).to_contain_text("Counted to 60.")
    expect(answer).to_contain_text("Goal: count to 60, then report to the harbour master")
    expect(answer).to_contain_text("nearly there")
    expect(olivia.locator("[data-timeline]")).to_contain_text("task.completed")

    # --- gina, of globex, sees none of it ---
    gina = sign_in(browser, live_harbor, "gina")
    gina.goto("/console/")
    expect(gina.locator("tr[data-run]")).to_have_count(0)
    for run_id in (deploy, count):
        response = gina.goto(f"/console/runs/{run_id}/")
        assert response is not None and response.status == 404
    gina.goto("/inbox/history/")
    expect(gina.locator("body")).not_to_contain_text(deploy[-8:])
    gina.goto("/inbox/")
    expect(gina.locator("[data-empty]")).to_be_visible()
    # Her own stream, replayed from the start of the log, carries nothing of acme's runs.
    seen = gina.evaluate("""() => new Promise((resolve) => {
        const got = [];
        const ws = new WebSocket(`ws://${location.host}/ws/events/?after=0`);
        ws.onmessage = (m) => got.push(JSON.parse(m.data).run);
        setTimeout(() => { ws.close(); resolve(got); }, 1500);
    })""")
    assert seen == []
    # Asking for an acme run by id: refused with "not found", which reaches the page (a
    # handshake refused before its accept would reach it as a bare 1006), nothing is sent.
    refused = gina.evaluate(f"""() => new Promise((resolve) => {{
        let got = 0;
        const ws = new WebSocket(`ws://${{location.host}}/ws/events/?run={count}&after=0`);
        ws.onmessage = () => {{ got += 1; }};
        ws.onclose = (event) => resolve({{code: event.code, got}});
    }})""")
    assert refused == {"code": 4404, "got": 0}

    print(f"browser scenario took {time.monotonic() - started:.1f}s")
