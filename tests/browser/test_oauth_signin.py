"""Alice's sign-in in a real browser: a calendar run parks, her inbox card says "Sign in to
Demo Calendar", she signs in at the provider's own login and consent pages (the live demo
provider), lands on "Authorization complete", and the run page shows the run completed."""

import re

import pytest
from playwright.sync_api import expect

from tests.oauth.helpers import wait_status
from tests.oauth.test_live_signin import forget_credentials

from .test_inbox_and_console import LIVE, sign_in

pytestmark = pytest.mark.browser


def test_alice_signs_in_from_the_inbox_card_and_the_run_completes(
    browser, oauth_harbor, live_provider, screenshots
) -> None:
    forget_credentials(oauth_harbor, "alice")
    page = sign_in(browser, oauth_harbor, "alice")
    page.goto("/console/new/")
    page.get_by_label("Agent").select_option("calendar")
    page.get_by_label("Query").fill("What is on my calendar?")
    page.get_by_role("button", name=re.compile("Start")).click()
    page.wait_for_url(re.compile(r"/console/runs/\w+/"))
    found = re.search(r"/console/runs/(\w+)/", page.url)
    assert found
    run_id = found.group(1)
    wait_status(oauth_harbor, run_id, "paused")

    page.goto("/inbox/")
    card = page.locator(f"article[data-run='{run_id}']")
    link = card.get_by_role("link", name="Sign in to Demo Calendar")
    expect(link).to_be_visible()
    page.screenshot(path=str(screenshots / "oauth-inbox-card.png"))
    with page.context.expect_page() as opened:
        link.click()  # the card opens the provider in a new tab
    provider = opened.value
    provider.set_default_timeout(LIVE)
    provider.wait_for_url(re.compile(re.escape(live_provider.url) + r"/accounts/login/"))
    expect(provider.get_by_role("heading", name="Sign in to Demo Calendar")).to_be_visible()
    provider.get_by_label("User name").fill("alice")
    provider.get_by_label("Password").fill(live_provider.logins["alice"])
    provider.get_by_role("button", name="Sign in").click()
    expect(provider.get_by_role("heading", name="Allow Harbor to use your account?")).to_be_visible()
    expect(provider.get_by_text("Read your calendar events")).to_be_visible()
    provider.screenshot(path=str(screenshots / "oauth-provider-consent.png"))
    provider.get_by_role("button", name="Allow").click()

    provider.wait_for_url(re.compile(re.escape(oauth_harbor.url) + r"/v1/tools/oauth/callback\?"))
    expect(provider.get_by_role("heading", name="Authorization complete")).to_be_visible()
    provider.screenshot(path=str(screenshots / "oauth-authorization-complete.png"))

    page.goto(f"/console/runs/{run_id}/")
    expect(page.locator("[data-run-status]")).to_have_attribute("data-run-status", "complete", timeout=LIVE)
    expect(page.locator("[data-answer]")).to_contain_text("Stand-up")
    page.screenshot(path=str(screenshots / "oauth-run-complete.png"))
