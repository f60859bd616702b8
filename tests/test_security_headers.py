"""Security headers: a Content-Security-Policy the pages pass with no inline script,
X-Frame-Options DENY, a Referrer-Policy, and HSTS with secure cookies over HTTPS."""

from html.parser import HTMLParser

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.factories import PauseFactory


class InlineFinder(HTMLParser):
    """Collects what a strict CSP would block: inline scripts, handlers and styles."""

    def __init__(self):
        super().__init__()
        self.blocked = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and not attrs.get("src") and attrs.get("type") != "application/json":
            self.blocked.append("inline <script>")
        if tag == "style":
            self.blocked.append("<style>")
        for name, value in attrs.items():
            if name.startswith("on") or name == "style" or (value or "").strip().lower().startswith("javascript:"):
                self.blocked.append(f"{tag} {name}")


def _directives(header: str) -> dict:
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


@pytest.fixture
def pages(people, probe):
    run = PauseFactory.create(caller=people.caller("alice")).run
    return ["/login/", "/console/", f"/console/runs/{run.pk}/", "/console/new/", "/inbox/", "/inbox/history/"]


@pytest.mark.parametrize("user", ["alice", "bob"])
def test_every_page_carries_a_strict_policy_and_passes_it(pages, user):
    client = Client()
    for path in pages:
        if path != "/login/":
            client.force_login(get_user_model().objects.get(username=user))
        response = client.get(path)
        assert response.status_code == 200, path
        policy = _directives(response["Content-Security-Policy"])
        assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"], path
        assert policy["frame-ancestors"] == ["'none'"] and policy["object-src"] == ["'none'"]
        finder = InlineFinder()
        finder.feed(response.content.decode())
        assert finder.blocked == [], (path, finder.blocked)
        assert response["X-Frame-Options"] == "DENY"
        assert response["Referrer-Policy"] == "same-origin"
        assert response["X-Content-Type-Options"] == "nosniff"


def test_the_api_docs_load_their_script_from_a_url(db):
    response = Client().get("/v1/docs")
    finder = InlineFinder()
    finder.feed(response.content.decode())
    assert response.status_code == 200 and "inline <script>" not in finder.blocked
    assert "'unsafe-inline'" not in _directives(response["Content-Security-Policy"])["script-src"]


def test_over_https_hsts_and_secure_cookies(people, settings):
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    client = Client()
    response = client.post("/login/", {"username": "alice", "password": "alice-password"}, secure=True)
    assert response.status_code == 302
    assert response["Strict-Transport-Security"].startswith("max-age=31536000")
    cookie = response.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["secure"] and cookie["httponly"]


def test_https_settings_turn_on_hsts(tmp_path):
    import os
    import subprocess
    import sys

    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, "
        "s.SESSION_COOKIE_NAME, s.CSRF_COOKIE_NAME, s.SESSION_COOKIE_PATH, s.SESSION_COOKIE_DOMAIN)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DJANGO_SETTINGS_MODULE="harbor_site.settings", HARBOR_HTTPS="1", HARBOR_VAR_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    # __Host- cookies: the browser takes them only over HTTPS, for Path=/ and no Domain.
    assert out.stdout.split() == ["31536000", "True", "True", "__Host-sessionid", "__Host-csrftoken", "/", "None"], (
        out.stderr
    )
