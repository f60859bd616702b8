"""The demo OAuth provider (approvals.oauth.provider) as a live process for tests, beside
the live Harbor: its own var folder, database and port, the Harbor registered as its
client, and the demo tenants' `calendar` source pointed at it.

    live_provider.url, .logins, .secret_file, .db (its SQLite file)
    oauth_harbor: the live Harbor with the source configured (the `live_harbor` object)
    ProviderBrowser(live_provider, "alice").consent(authorize_url, allow=True) -> callback URL
"""

import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest

from tests.live import PYTHON, ROOT, LiveHarbor, _wait_healthy, free_port

PROVIDER = [PYTHON, "-m", "approvals.oauth.provider"]


@dataclass
class LiveProvider:
    url: str
    env: dict
    var_dir: Path
    processes: list = field(default_factory=list)

    @property
    def logins(self) -> dict[str, str]:
        return json.loads((self.var_dir / "oauth-provider-logins.json").read_text())

    @property
    def secret_file(self) -> Path:
        return self.var_dir / "oauth-client-secret"

    @property
    def db(self) -> Path:
        return self.var_dir / "oauth-provider.sqlite3"

    def manage(self, *args: str) -> str:
        result = subprocess.run([*PROVIDER, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120)
        if result.returncode:
            raise RuntimeError(f"provider {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def sql(self, statement: str, params: tuple = ()) -> list[tuple]:
        """Read or change the provider's own database (as its operator could)."""
        with sqlite3.connect(self.db, timeout=20) as conn:
            return conn.execute(statement, params).fetchall()


@pytest.fixture(scope="session")
def live_provider() -> Iterator[LiveProvider]:
    var_dir = Path(tempfile.mkdtemp(prefix="harbor-provider-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "HARBOR_VAR_DIR")}
    env.update(HARBOR_OAUTH_PROVIDER_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1")
    port = free_port()
    provider = LiveProvider(url=f"http://127.0.0.1:{port}", env=env, var_dir=var_dir)
    log = open(var_dir / "server.log", "w")
    try:
        provider.manage("migrate", "-v0")
        provider.processes.append(
            subprocess.Popen(
                [*PROVIDER, "serve", "--port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        )
        _wait_healthy(provider.url, provider.processes)
        yield provider
    finally:
        for proc in provider.processes:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
        shutil.rmtree(var_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def oauth_harbor(live_harbor: LiveHarbor, live_provider: LiveProvider) -> LiveHarbor:
    live_provider.manage(
        "provider_setup",
        "--client-secret-file",
        "oauth-client-secret",
        "--quiet",
        "--redirect-uri",
        f"{live_harbor.url}/v1/tools/oauth/callback",
    )
    live_harbor.manage(
        "harbor_oauth_demo", "--provider-url", live_provider.url, "--client-secret-file", str(live_provider.secret_file)
    )
    return live_harbor


def form_fields(html: str) -> dict[str, str]:
    """The hidden fields and CSRF token of a page's form (either quote style)."""
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', html)
    found += re.findall(r"<input type=\"hidden\" name=\"([^\"]+)\" value='([^']*)'", html)
    return {name: value.replace("&amp;", "&") for name, value in found}


class ProviderBrowser:
    """A person at the provider's own pages, over HTTP: sign in, then allow or deny."""

    def __init__(self, provider: LiveProvider, person: str) -> None:
        self.provider, self.person = provider, person
        self.http = httpx.Client(timeout=20)

    def consent(self, authorize_url: str, *, allow: bool = True) -> str:
        """Follow the authorize URL through login and consent; the redirect back to Harbor."""
        page = self.http.get(authorize_url)
        if page.status_code == 302 and "/accounts/login/" in page.headers["location"]:
            login_url = urljoin(self.provider.url, page.headers["location"])
            login = self.http.get(login_url)
            signed_in = self.http.post(
                login_url,
                data={
                    **form_fields(login.text),
                    "username": self.person,
                    "password": self.provider.logins[self.person],
                    "next": parse_qs(urlsplit(login_url).query)["next"][0],
                },
            )
            assert signed_in.status_code == 302, "the provider refused the demo login"
            page = self.http.get(urljoin(self.provider.url, signed_in.headers["location"]))
        assert page.status_code == 200 and "authorizationForm" in page.text, page.text[:500]
        data = form_fields(page.text)
        if allow:
            data["allow"] = "Allow"
        answer = self.http.post(authorize_url, data=data)
        assert answer.status_code == 302, answer.text[:500]
        return answer.headers["location"]
