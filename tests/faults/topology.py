"""A production-shaped Harbor whose processes the fault tests can kill: its own PostgreSQL
database and redis-server, Daphne web processes, Celery workers (concurrency 1) and one
beat (the sweeper, a process of its own so that killing a worker never stops sweeps).

Every process runs in a process group of its own, so a SIGKILL takes a Celery worker's
pool child with it, as a machine dying would. Tests speak HTTP/websockets to it, and may
read the database directly (the tool-call ledger, the event log) with psycopg.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import redis
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.live import PYTHON, ROOT, free_port, run_manage

SECRET_KEY = "faults-only-secret-key-0123456789abcdef0123456789"


class Topology:
    def __init__(self, *, daphnes: int = 2, workers: int = 2, env: dict | None = None) -> None:
        self.var = Path(tempfile.mkdtemp(prefix="harbor-faults-"))
        self.database = f"harbor_faults_{uuid.uuid4().hex[:8]}"
        self.pg_base = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
        self.redis_port = free_port()
        self.ports = [free_port() for _ in range(daphnes)]
        self.workers = [f"worker{i}" for i in range(workers)]
        self.procs: dict[str, subprocess.Popen] = {}
        self.restarts: dict[str, int] = {}
        self._tokens: dict[tuple, str] = {}
        key = ec.generate_private_key(ec.SECP256R1())
        (self.var / "jwt.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        (self.var / "jwt.pub").write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        base = {
            k: v
            for k, v in os.environ.items()
            if k not in ("HARBOR_TEST_DB", "DJANGO_SETTINGS_MODULE", "HARBOR_JWT_PUBLIC_KEYS")
        }
        self.env = {
            **base,
            "DATABASE_URL": f"{self.pg_base}/{self.database}",
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "SECRET_KEY": SECRET_KEY,
            "HARBOR_VAR_DIR": str(self.var),
            "HARBOR_STATIC_ROOT": str(self.var / "static"),
            "HARBOR_HTTPS": "0",  # plain HTTP on loopback
            "HARBOR_JWT_PUBLIC_KEYS": str(self.var / "jwt.pub"),
            "HARBOR_LEASE_SECONDS": "1",  # a dead worker's run is taken over within about a second
            "HARBOR_SWEEP_SECONDS": "0.5",
            "HARBOR_TICK_SECONDS": "0.1",
            "HARBOR_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> "Topology":
        self._admin_sql(f'CREATE DATABASE "{self.database}"')
        self.start_process("redis")
        self.manage("migrate", "--noinput", "-v0")
        self.manage("harbor_demo")
        # The faults' runs are approved by their owners with their tokens, under PROTOCOL §4's own
        # decision rights: acme's demo policy (two release managers, never the requester) is
        # replaced by a version with no rules.
        no_rules = self.var / "no-rules.cedar"
        no_rules.write_text("// No approval rules: the protocol's own decision rights.\n")
        self.manage("harbor_policy", "load", str(no_rules), "--tenant", "acme")
        self.manage("collectstatic", "--noinput", "-v0")
        for name in [*(f"daphne{i}" for i in range(len(self.ports))), *self.workers, "beat"]:
            self.start_process(name, wait=False)
        for name in self.procs:
            self._wait_ready(name)
        return self

    def stop(self) -> None:
        for name in reversed(list(self.procs)):  # redis last, so nothing stops retrying it
            self.kill(name, signal.SIGTERM)
        self._admin_sql(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        if os.environ.get("HARBOR_FAULTS_KEEP"):  # keep the logs for a post-mortem
            print(f"topology logs kept in {self.var}")
        else:
            shutil.rmtree(self.var, ignore_errors=True)

    def _argv(self, name: str) -> list[str]:
        if name == "redis":
            return [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.var),
            ]
        if name.startswith("daphne"):
            port = self.ports[int(name[len("daphne") :])]
            return [
                PYTHON,
                "-m",
                "harbor_site.serve",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "harbor_site.asgi:application",
            ]
        if name.startswith("worker"):
            # INFO only so that "ready." shows in the log; the app's own logger stays at WARNING.
            return [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "harbor_site",
                "worker",
                "--concurrency",
                "1",
                "-n",
                f"{name}@%h",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
            ]
        if name == "beat":
            return [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "harbor_site",
                "beat",
                "--loglevel",
                "WARNING",
                "-s",
                str(self.var / "beat-schedule"),
            ]
        raise ValueError(name)

    def log(self, name: str) -> Path:
        return self.var / f"{name}.log"

    def start_process(self, name: str, *, wait: bool = True) -> None:
        assert name not in self.procs or self.procs[name].poll() is not None, f"{name} is running"
        self.restarts[name] = self.restarts.get(name, -1) + 1
        out = open(self.log(name), "a")
        out.write(f"\n=== start #{self.restarts[name]} at {time.time():.3f}\n")
        out.flush()
        self.procs[name] = subprocess.Popen(
            self._argv(name), cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        if wait:
            self._wait_ready(name)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a worker and its pool child) and reap it."""
        proc = self.procs[name]
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if sig != signal.SIGKILL:
            try:  # a graceful stop must not leave a pool child behind either
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def restart(self, name: str, *, sig: int = signal.SIGKILL, wait: bool = True) -> None:
        self.kill(name, sig)
        self.start_process(name, wait=wait)

    def _wait_ready(self, name: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        mark = f"=== start #{self.restarts[name]} "
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited early:\n{self.log(name).read_text()[-3000:]}")
            if self._ready(name, mark):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not become ready:\n{self.log(name).read_text()[-3000:]}")

    def _ready(self, name: str, mark: str) -> bool:
        if name == "redis":
            try:
                return bool(redis.Redis(port=self.redis_port, socket_timeout=1).ping())
            except redis.RedisError:
                return False
        if name.startswith("daphne"):
            try:
                return httpx.get(f"{self.url(int(name[len('daphne') :]))}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        if name.startswith("worker"):
            text = self.log(name).read_text()
            return " ready." in text[text.rfind(mark) :]
        return True  # beat has no readiness signal; it only publishes

    # --- talking to it --------------------------------------------------------------------

    def url(self, index: int = 0) -> str:
        return f"http://127.0.0.1:{self.ports[index]}"

    def manage(self, *args: str) -> str:
        return run_manage(self.env, *args, timeout=180)

    @property
    def logins(self) -> dict[str, str]:
        return json.loads((self.var / "demo-logins.json").read_text())

    def token(self, user: str = "alice", session: str = "s1", tenant: str = "acme") -> str:
        key = (tenant, user, session)
        if key not in self._tokens:
            self._tokens[key] = self.manage(
                "harbor_token",
                "--tenant",
                tenant,
                "--user",
                user,
                "--session",
                session,
                "--private-key",
                str(self.var / "jwt.key"),
            ).strip()
        return self._tokens[key]

    def api(self, index: int = 0, user: str = "alice", session: str = "s1", **kwargs) -> httpx.Client:
        return httpx.Client(
            base_url=self.url(index),
            timeout=kwargs.pop("timeout", 30),
            headers={"Authorization": f"Bearer {self.token(user, session)}"},
            **kwargs,
        )

    def login_cookies(self, user: str = "alice", index: int = 0) -> httpx.Cookies:
        """Sign in through the login page (with its CSRF token) and return the session cookies."""
        with httpx.Client(base_url=self.url(index), timeout=30) as client:
            page = client.get("/login/")
            found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
            assert found, page.text[:300]
            csrf = found.group(1)
            done = client.post(
                "/login/",
                data={"csrfmiddlewaretoken": csrf, "username": user, "password": self.logins[user]},
                headers={"Origin": self.url(index), "Referer": f"{self.url(index)}/login/"},
            )
            assert done.status_code == 302, (done.status_code, done.text[:500])
            assert "sessionid" in client.cookies, "login did not set a session cookie"
            return client.cookies

    def sql(self, query: str, params=()) -> list[tuple]:
        with psycopg.connect(self.env["DATABASE_URL"], autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def _admin_sql(self, sql: str) -> None:
        with psycopg.connect(f"{self.pg_base}/postgres", autocommit=True) as conn:
            conn.execute(sql)
