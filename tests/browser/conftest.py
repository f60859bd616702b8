"""A real browser for the pages: Playwright driving Debian's Chromium (bin/test installs
it; Playwright's own browser downloads are never used)."""

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("HARBOR_CHROMIUM", "/usr/bin/chromium")
# Screenshots land in docs/ only through bin/screenshots; the tests never touch tracked files.
SCREENSHOTS = os.environ.get("HARBOR_SCREENSHOTS")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="the test extras install playwright")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        missing = f"no Chromium at {CHROMIUM} (bin/test installs Debian's chromium)"
        if os.environ.get("CI"):
            pytest.fail(missing)  # CI must run the browser tests, never skip them silently
        pytest.skip(missing)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def screenshots(tmp_path) -> Path:
    folder = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder
