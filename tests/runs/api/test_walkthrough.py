"""The protocol walkthrough (docs/protocol-walkthrough.md) runs, as written, against the
product started by the README's run command (`bin/run`, the embedded default), so the docs
cannot drift from the code. Runs in both CI passes: bin/run always serves the embedded
default, on its own port, data directory and SQLite file."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from tests.live import free_port

ROOT = Path(__file__).resolve().parents[3]


def test_the_protocol_walkthrough_runs_against_bin_run():
    scratch = Path(tempfile.mkdtemp(prefix="harbor-walkthrough-"))
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "HARBOR_TEST_DB", "DJANGO_SETTINGS_MODULE", "HARBOR_EXECUTOR")
    }
    env.update(
        PORT=str(port),
        HARBOR_VAR_DIR=str(scratch),
        HARBOR_SQLITE_PATH=str(scratch / "harbor.sqlite3"),
        HARBOR_TICK_SECONDS="0.2",
        HARBOR_SWEEP_SECONDS="0.5",
        HARBOR=f"http://127.0.0.1:{port}",
        PY=str(ROOT / ".venv" / "bin" / "python"),
        PYTHONUNBUFFERED="1",
    )
    log = open(scratch / "server.log", "w")
    server = subprocess.Popen(
        [str(ROOT / "bin" / "run")], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300  # bin/run may first install the project into .venv
        while True:
            assert server.poll() is None, (scratch / "server.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "bin/run did not serve /healthz"
            time.sleep(0.3)
        result = subprocess.run(
            [str(ROOT / "docs" / "walkthrough.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        output = result.stdout + result.stderr
        print(output)
        assert result.returncode == 0, output
        for expected in [
            '"reused":true',
            "\nDeployed build 42 to production.\n",
            '{"code":"already_resumed"',
            'may not approve it (rule staging deploys)"} [HTTP 403]',  # the requester, under acme's policy
            '"Code": "constraints_conflict"',
            '"Cause": "operator"',
            '{"code":"scope_mismatch","message":"prioritize needs the admin scope"} [HTTP 403]',
            " pause.requested ",
            " pause.resumed ",
            " task.completed ",
            " tool.rejected ",
            " task.redirected ",
            " context.injected ",
            " message.received ",
            " task.prioritised ",
            " task.cancelled ",
            "[HTTP 404]",
            "unknown_method",
            "auth_rejected",
            "== walkthrough complete",
        ]:
            assert expected in output, expected
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)  # its keys and secrets with it
