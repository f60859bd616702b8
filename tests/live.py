"""A live Harbor for tests that need a real server: Daphne serving the ASGI app (and, in
the PostgreSQL pass, a Celery worker with beat), on a database of its own, seeded with the
demo tenants. Tests talk to it over HTTP and websockets only, like any client.

Use the `live_harbor` fixture (session-scoped):
    live_harbor.url          "http://127.0.0.1:<port>"
    live_harbor.logins       {"alice": "<password>", ...}
    live_harbor.manage(*args) runs a management command against the live database
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveHarbor:
    url: str
    env: dict
    var_dir: Path
    processes: list = field(default_factory=list)

    @property
    def logins(self) -> dict[str, str]:
        return json.loads((self.var_dir / "demo-logins.json").read_text())

    def manage(self, *args: str) -> str:
        return run_manage(self.env, *args)


def run_manage(env: dict, *args: str, timeout: float = 120) -> str:
    """`manage.py <args>` against a live server's environment; its output, or an error."""
    result = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def _environment(var_dir: Path) -> tuple[dict, str | None]:
    env = {k: v for k, v in os.environ.items() if k not in ("HARBOR_TEST_DB", "DJANGO_SETTINGS_MODULE")}
    env.update(
        HARBOR_VAR_DIR=str(var_dir),
        HARBOR_SWEEP_SECONDS="0.3",
        HARBOR_TICK_SECONDS="0.2",
        HARBOR_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    database = None
    if os.environ.get("DATABASE_URL"):
        base = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
        database = f"harbor_live_{uuid.uuid4().hex[:8]}"
        env["DATABASE_URL"] = f"{base}/{database}"
        # A Redis database of its own (the suite's + 8), so concurrent suites never cross-talk.
        base_redis, _, index = os.environ["REDIS_URL"].rpartition("/")
        env["REDIS_URL"] = f"{base_redis}/{(int(index or 0) + 8) % 16}"
        env["HARBOR_HTTPS"] = "0"  # plain HTTP on loopback
        env["HARBOR_STATIC_ROOT"] = str(var_dir / "static")  # production serves collected files
    else:
        env["HARBOR_SQLITE_PATH"] = str(var_dir / "live.sqlite3")
        env["HARBOR_EXECUTOR"] = "thread"
    return env, database


def _admin_sql(sql: str) -> None:
    import psycopg

    base = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(sql)


def _wait_healthy(url: str, processes: list, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in processes:
            if proc.poll() is not None:
                raise RuntimeError(f"a live server process exited early ({proc.args})")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the live server did not become healthy")


@pytest.fixture(scope="session")
def live_harbor():
    var_dir = Path(tempfile.mkdtemp(prefix="harbor-live-"))
    env, database = _environment(var_dir)
    if database:
        _admin_sql(f'CREATE DATABASE "{database}"')
    port = free_port()
    harbor = LiveHarbor(url=f"http://127.0.0.1:{port}", env=env, var_dir=var_dir)
    env["HARBOR_OAUTH_REDIRECT_URI"] = f"{harbor.url}/v1/tools/oauth/callback"  # tests/oauth_live.py
    log = open(var_dir / "server.log", "w")
    try:
        harbor.manage("migrate", "--noinput", "-v0")
        harbor.manage("harbor_demo")
        if database:
            harbor.manage("collectstatic", "--noinput", "-v0")
        harbor.processes.append(
            subprocess.Popen(
                [PYTHON, "-m", "harbor_site.serve", "-b", "127.0.0.1", "-p", str(port), "harbor_site.asgi:application"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        if database:
            harbor.processes.append(
                subprocess.Popen(
                    [
                        PYTHON,
                        "-m",
                        "celery",
                        "-A",
                        "harbor_site",
                        "worker",
                        "-B",
                        "--concurrency",
                        "2",
                        "--loglevel",
                        "WARNING",
                        "-s",
                        str(var_dir / "beat-schedule"),
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        _wait_healthy(harbor.url, harbor.processes)
        yield harbor
    finally:
        for proc in harbor.processes:
            proc.terminate()
        for proc in harbor.processes:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
        if database:
            _admin_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        shutil.rmtree(var_dir, ignore_errors=True)
