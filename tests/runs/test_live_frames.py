"""Against a live Daphne, with a real websocket client that takes messages of up to 1 MiB
(as `websockets` does by default, and as Daphne itself takes): a 2 MiB event reaches the
run page's socket cut to size, and the events after it follow."""

import json
import re
import time

import httpx
from websockets.sync.client import connect

SHELL = """
from runs.domain import events
from runs.identity.callers import caller_resolve
from runs.application import run_start
from runs.models import Run
{body}
"""


def in_server(live_harbor, body: str) -> str:
    return live_harbor.manage("shell", "-c", SHELL.format(body=body)).strip().splitlines()[-1]


def signed_in_cookie(live_harbor, username: str) -> str:
    with httpx.Client(base_url=live_harbor.url, timeout=10) as client:
        page = client.get("/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert csrf is not None
        signed = client.post(
            "/login/",
            data={"username": username, "password": live_harbor.logins[username], "csrfmiddlewaretoken": csrf[1]},
        )
        assert signed.status_code == 302
        return "; ".join(f"{name}={value}" for name, value in client.cookies.items())


def test_a_two_mib_event_reaches_a_real_client_cut_to_size(live_harbor):
    run_id = in_server(
        live_harbor,
        "print(run_start(caller=caller_resolve(tenant='acme', user='olivia', session='big'), "
        "query='count to 1', agent_id='countdown')[0].pk)",
    )
    ws_url = live_harbor.url.replace("http://", "ws://") + f"/ws/events/?run={run_id}"
    headers = {"Cookie": signed_in_cookie(live_harbor, "olivia"), "Origin": live_harbor.url}
    with connect(ws_url, additional_headers=headers, open_timeout=10) as ws:  # max_size: 1 MiB
        emit = (
            "with events.atomic():\n"
            f"    run = Run.objects.get(pk={run_id!r})\n"
            "    events.emit(run=run, type='tool.completed', payload={{'Tool': 'fetch', 'Step': 90, "
            "'Result': 'x' * {size}, 'Attempt': 1}})\n"
            "print('ok')"
        )
        in_server(live_harbor, emit.format(size=2 * 1024 * 1024))
        in_server(live_harbor, emit.format(size=10))
        seen: list[dict] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len([e for e in seen if e["payload"].get("Step") == 90]) < 2:
            seen.append(json.loads(ws.recv(timeout=deadline - time.monotonic())))
    big, small = [e for e in seen if e["payload"].get("Step") == 90]
    assert big["truncated"] is True and "cut:" in big["payload"]["Result"] and len(json.dumps(big)) < 1024 * 1024
    assert small["payload"]["Result"] == "x" * 10 and "truncated" not in small
