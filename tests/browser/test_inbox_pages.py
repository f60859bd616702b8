"""The inbox in pages, in a real browser against a live Daphne server: an approver with a
long inbox sees the newest page, appends the older one in place, and the whole list stays
live: a new pause arrives on top, a pause on the appended page decided elsewhere leaves.
A tenant of its own, so the other browser tests' inboxes stay as they expect."""

import json
import re

import httpx
import pytest
from playwright.sync_api import Page, expect

from approvals.web.views import INBOX_PAGE_SIZE

from .test_inbox_and_console import LIVE, no_reload_marker

pytestmark = pytest.mark.browser

TENANT = "initech"
SETUP = f"""
import json
from django.contrib.auth.models import User
from runs.identity.callers import caller_resolve
from runs.identity.permissions import membership_grant
from runs.management.commands._seed import seed_history
from runs.models import Role, Tenant
tenant = Tenant.objects.create(slug={TENANT!r}, name="Initech")
for name, role in (("ivy", Role.APPROVER), ("ike", Role.ADMIN), ("iris", Role.MEMBER)):
    membership_grant(tenant=tenant, user=User.objects.create_user(name, password=name + "-password"), role=role)
iris = caller_resolve(tenant={TENANT!r}, user="iris", session="cli")
seed_history(caller=iris, count=3000, decider=caller_resolve(tenant={TENANT!r}, user="ike", session="cli").user)
"""


def protocol(live_harbor, user: str, route: str, body: dict) -> dict:
    token = live_harbor.manage("harbor_token", "--tenant", TENANT, "--user", user, "--session", "cli").strip()
    response = httpx.post(
        f"{live_harbor.url}/v1/control/{route}", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()


def sign_in(browser, live_harbor, username: str) -> Page:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_harbor.url)
    context.set_default_timeout(LIVE)
    page = context.new_page()
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"{username}-password")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/inbox/"))
    return page


def test_an_appended_older_page_stays_live(browser, live_harbor):
    try:
        live_harbor.manage("harbor_token", "--tenant", TENANT, "--user", "ivy", "--session", "cli")
    except RuntimeError:
        pytest.skip("this deployment mints no development tokens")
    live_harbor.manage("shell", "-c", SETUP)
    ivy = sign_in(browser, live_harbor, "ivy")
    cards = ivy.locator("[data-cards] article[data-pause]")
    expect(cards).to_have_count(INBOX_PAGE_SIZE)
    expect(ivy.locator("[data-open-count]")).to_have_text("30")
    expect(ivy.locator("[data-live-indicator]")).to_have_text("live")
    no_reload_marker(ivy)

    # --- the older page is appended in place (30 open: the second page holds the rest) ---
    assert 30 - INBOX_PAGE_SIZE <= INBOX_PAGE_SIZE
    ivy.get_by_role("link", name="Show older pauses").click()
    expect(cards).to_have_count(30)
    expect(ivy.get_by_role("link", name="Show older pauses")).to_have_count(0)
    keys = cards.evaluate_all("cards => cards.map((c) => c.dataset.key)")
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == 30  # newest first, each once
    assert ivy.evaluate("window.__harborNoReload === true")

    # --- a new pause arrives on top; the appended cards stay ---
    run_id = protocol(
        live_harbor, "iris", "start", {"identity": {}, "query": "deploy build 8 to qa", "agent_id": "deploy"}
    )["task_id"]
    expect(cards.first).to_have_attribute("data-run", run_id)
    expect(cards).to_have_count(31)
    expect(ivy.locator("[data-open-count]")).to_have_text("31")

    # --- the oldest card, from the appended page, is decided elsewhere: it leaves ---
    oldest = cards.last.get_attribute("data-run")
    protocol(live_harbor, "ike", "reject", {"identity": {"run": oldest}, "payload": {"reason": "stale"}})
    expect(ivy.locator(f"article[data-run='{oldest}']")).to_have_count(0)
    expect(cards).to_have_count(30)
    expect(ivy.locator("[data-open-count]")).to_have_text("30")
    expect(ivy.locator("[data-toasts]")).to_contain_text("decided elsewhere by ike (reject)")
    assert ivy.evaluate("window.__harborNoReload === true")
    assert json.loads(ivy.evaluate("JSON.stringify(document.querySelectorAll('[data-empty]').length)")) == 0
    ivy.context.close()
