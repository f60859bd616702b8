"""Talking to the live Harbor as people do (its pages, over HTTP) and reading what it
recorded (through manage.py shell against its database)."""

import json
import re
import time
from typing import Any

import httpx

from tests.live import LiveHarbor
from tests.oauth_live import form_fields

SHELL = """
import json
from approvals.domain.selectors import pause_payload_shown
from approvals.models import Pause
from approvals.oauth.models import OAuthCredential, OAuthFlow
from runs.domain import events
from runs.models import Event, Run
{body}
"""


def in_server(harbor: LiveHarbor, body: str, *, env: dict | None = None) -> Any:
    from tests.live import run_manage

    output = run_manage({**harbor.env, **(env or {})}, "shell", "-c", SHELL.format(body=body))
    return json.loads(output.strip().splitlines()[-1])


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def signed_in(harbor: LiveHarbor, person: str) -> httpx.Client:
    # As a browser: its navigations ask for HTML (the callback answers other clients in JSON).
    client = httpx.Client(base_url=harbor.url, timeout=30, headers={"Accept": BROWSER_ACCEPT})
    page = client.get("/login/")
    answer = client.post(
        "/login/", data={**form_fields(page.text), "username": person, "password": harbor.logins[person]}
    )
    assert answer.status_code == 302, "the demo login failed"
    return client


def begin(client: httpx.Client, authorize_url: str) -> str:
    """Follow a pause's AuthorizeURL in the person's browser (signed in to Harbor): Harbor
    notes the browser as the one that began the sign-in and sends it on; where to."""
    answer = client.get(authorize_url, follow_redirects=False)
    assert answer.status_code == 302, answer.text[:300]
    return answer.headers["location"]


def start_calendar_run(client: httpx.Client) -> str:
    page = client.get("/console/new/")
    answer = client.post(
        "/console/new/",
        data={**form_fields(page.text), "query": "what is on my calendar?", "agent_id": "calendar", "priority": "0"},
    )
    assert answer.status_code == 302, answer.text[:300]
    found = re.search(r"/console/runs/(\w+)/", answer.headers["location"])
    assert found, answer.headers["location"]
    return found.group(1)


def run_state(harbor: LiveHarbor, run_id: str) -> dict:
    return in_server(
        harbor,
        f"r = Run.objects.get(pk={run_id!r}); "
        "print(json.dumps({'status': r.status, 'answer': r.answer, "
        "'failure': r.failure_message, 'pauses': r.pauses.count()}))",
    )


def wait_status(harbor: LiveHarbor, run_id: str, wanted: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = run_state(harbor, run_id)
        if row["status"] == wanted:
            return row
        if row["status"] in ("complete", "failed", "cancelled"):
            raise AssertionError(f"run {run_id} ended {row} instead of reaching {wanted}")
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} did not reach {wanted}")


def run_events(harbor: LiveHarbor, run_id: str) -> list[dict]:
    return in_server(
        harbor,
        f"print(json.dumps([events.envelope(e) for e in "
        f"Event.objects.filter(run_id={run_id!r}).order_by('sequence')]))",
    )


def open_pause(harbor: LiveHarbor, run_id: str) -> dict:
    return in_server(
        harbor,
        f"p = Pause.objects.get(run_id={run_id!r}, state='paused'); "
        "print(json.dumps({'id': p.pk, 'cause': p.cause, 'reason': p.reason, 'payload': pause_payload_shown(p, True)}))",
    )


def pause_states(harbor: LiveHarbor, run_id: str) -> list[list[str]]:
    return in_server(
        harbor,
        f"print(json.dumps([[p.state, p.decision] for p in "
        f"Pause.objects.filter(run_id={run_id!r}).order_by('created_at')]))",
    )
