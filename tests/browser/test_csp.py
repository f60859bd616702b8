"""The pages under their Content-Security-Policy in a real browser: no violation reported,
and the live websocket still connects (same-origin under connect-src 'self')."""

import re

import pytest
from playwright.sync_api import expect

from .test_inbox_and_console import LIVE, sign_in, start_run

pytestmark = pytest.mark.browser


def test_the_pages_raise_no_csp_violation_and_stay_live(browser, live_harbor):
    # A countdown: no pause, so the inbox other browser tests expect empty stays empty.
    run_id = start_run(live_harbor, user="alice", agent_id="countdown", query="count to 2")
    page = sign_in(browser, live_harbor, "olivia")
    violations = []
    page.on(
        "console",
        lambda message: violations.append(message.text) if "Content Security Policy" in message.text else None,
    )
    page.evaluate(
        "() => document.addEventListener('securitypolicyviolation', e => console.error("
        "'Content Security Policy violation: ' + e.violatedDirective))"
    )
    for path in ("/console/", f"/console/runs/{run_id}/", "/inbox/", "/console/new/"):
        page.goto(path)
        page.evaluate(
            "() => document.addEventListener('securitypolicyviolation', e => console.error("
            "'Content Security Policy violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
        )
        if path != "/console/new/":
            expect(page.locator("[data-live-indicator]")).to_have_text("live", timeout=LIVE)
    assert page.context.pages[0].url.endswith("/console/new/")
    assert violations == []
    page.context.close()


def test_a_page_cannot_be_framed(browser, live_harbor):
    context = browser.new_context(base_url=live_harbor.url)
    page = context.new_page()
    response = page.goto("/login/")
    assert response.headers["x-frame-options"] == "DENY"
    assert re.search(r"frame-ancestors 'none'", response.headers["content-security-policy"])
    context.close()


def test_a_first_visit_logs_no_console_error(browser, live_harbor):
    """A fresh browser's first page, the sign-in page: nothing it or the browser asks for on
    its own (the site's icon) fails to load."""
    context = browser.new_context(base_url=live_harbor.url)
    page = context.new_page()
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto("/login/")
    page.wait_for_load_state("networkidle")
    assert errors == []
    context.close()
