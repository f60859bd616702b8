"""The inbox in pages, in a real browser against a live Daphne server: an approver with a
long inbox sees the newest page, appends the older one in place, and the whole list stays
live: a new pause arrives on top, a pause on the appended page decided elsewhere leaves.
A tenant of its own, so the other browser tests' inboxes stay as they expect."""

import json

import httpx
import pytest
from playwright.sync_api import expect

from approvals.web.views import INBOX_PAGE_SIZE

from .test_inbox_and_console import no_reload_marker, sign_in

pytestmark = pytest.mark.browser

TENANT = "initech"
SETUP = f"""
import json
from django.contrib.auth.models import User
from runs.identity.callers import caller_resolve
from runs.identity.permissions import membership_grant
from bench.seed import seed_history
from runs.models import Role, Tenant
tenant = Tenant.objects.create(slug={TENANT!r}, name="Initech")
for name, role in (("ivy", Role.APPROVER), ("ike", Role.ADMIN), ("iris", Role.MEMBER)):
    membership_grant(tenant=tenant, user=User.objects.create_user(name, password=name + "-password"), role=role)
iris = caller_resolve(tenant={TENANT!r}, user="iris", session="cli")
seed_history(caller=iris, count=3000, decider=caller_resolve(tenant={TENANT!r}, user="ike", session="cli").user)
"""


def start(live_harbor, *, user: str, query: str) -> str:
    """Start a deploy run in the tenant through POST /v1/control/start, or through the
    service where this deployment mints no development tokens (production)."""
    token = _token(live_harbor, user)
    if token:
        response = httpx.post(
            f"{live_harbor.url}/v1/control/start",
            json={"identity": {}, "query": query, "agent_id": "deploy"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return response.json()["task_id"]
    statement = f"print(json.dumps(run_start(caller=c, query={query!r}, agent_id='deploy')[0].pk))"
    return json.loads(_service(live_harbor, user, statement))


def reject_elsewhere(live_harbor, *, user: str, run_id: str) -> None:
    token = _token(live_harbor, user)
    if token:
        response = httpx.post(
            f"{live_harbor.url}/v1/control/reject",
            json={"identity": {"run": run_id}, "payload": {"reason": "stale"}},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return
    _service(live_harbor, user, f"steering_submit(caller=c, run_id={run_id!r}, method='reject', payload={{}})")


def _token(live_harbor, user: str) -> str | None:
    try:
        return live_harbor.manage("harbor_token", "--tenant", TENANT, "--user", user, "--session", "cli").strip()
    except RuntimeError:
        return None


def _service(live_harbor, user: str, statement: str) -> str:
    """Run a statement as `user` of the tenant in the live deployment; its last line out."""
    out = live_harbor.manage(
        "shell",
        "-c",
        (
            "import json\nfrom runs.identity.callers import caller_resolve\n"
            "from runs.application import run_start, steering_submit\n"
            f"c = caller_resolve(tenant={TENANT!r}, user={user!r}, session='cli')\n{statement}"
        ),
    )
    return out.strip().splitlines()[-1] if out.strip() else ""


def test_an_appended_older_page_stays_live(browser, live_harbor):
    live_harbor.manage("shell", "-c", SETUP)
    ivy = sign_in(browser, live_harbor, "ivy", "ivy-password")
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
    run_id = start(live_harbor, user="iris", query="deploy build 8 to staging")
    expect(cards.first).to_have_attribute("data-run", run_id)
    expect(cards).to_have_count(31)
    expect(ivy.locator("[data-open-count]")).to_have_text("31")

    # --- the oldest card, from the appended page, is decided elsewhere: it leaves ---
    oldest = cards.last.get_attribute("data-run")
    assert oldest
    reject_elsewhere(live_harbor, user="ike", run_id=oldest)
    expect(ivy.locator(f"article[data-run='{oldest}']")).to_have_count(0)
    expect(cards).to_have_count(30)
    expect(ivy.locator("[data-open-count]")).to_have_text("30")
    expect(ivy.locator("[data-toasts]")).to_contain_text("decided elsewhere by ike (reject)")
    assert ivy.evaluate("window.__harborNoReload === true")
    expect(ivy.locator("[data-empty]")).to_have_count(0)
    ivy.context.close()
