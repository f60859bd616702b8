"""The application Daphne serves for the live benchmark (`python -m bench --live`): Harbor's own
ASGI application, plus routes that start a run and park a pause in this process, answering
when the pause committed.

Pauses are made through the product's services in the Daphne process itself, so that on the
embedded default (the in-memory channel layer) their push reaches the sockets this process
serves. Two ways: a run of the one-gate agent driven by the run loop (`burst`: its earlier
events are pushed a moment before the pause), or a pause parked on a started run in a
transaction of its own (`alone`: the pause's push is the only one). The commit time is
taken in the push that runs right after the commit (`transaction.on_commit`), on the
machine-wide monotonic clock the benchmark's clients also read."""

import json
import time
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from asgiref.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from django.conf import settings
from django.utils import timezone

from harbor_site import asgi  # sets Django up: the imports below need the app registry

harbor = asgi.application

from approvals.domain.services import pause_park  # noqa: E402
from runs.application import run_start  # noqa: E402
from runs.domain import events, push  # noqa: E402
from runs.domain.transitions import move  # noqa: E402
from runs.identity.callers import caller_resolve  # noqa: E402
from runs.models import Run, RunStatus  # noqa: E402
from runs.runtime.dispatch import drain  # noqa: E402

from .agents import ONE_GATE  # noqa: E402  (registers it)

START_PATH = "/__bench__/start"  # a run, left pending (no pause yet); ?tenant=globex: gina's, else alice's
PARK_PATH = "/__bench__/park"  # ?run=<id>: a pause on it, alone in its transaction
BURST_PATH = "/__bench__/burst"  # a run of the one-gate agent up to its pause

_committed: dict[str, tuple[int, float]] = {}  # run -> its pause.requested event's sequence, when pushed
_push = push.push


def _timed_push(tenant_id: int, written: list[push.Pushed]) -> None:
    now = time.monotonic()
    for event, _ in written:
        if event.type == events.PAUSE_REQUESTED:
            _committed[event.run_id] = (event.sequence, now)
    _push(tenant_id, written)


push.push = _timed_push  # the commit's own push: events look it up as they are numbered


STARTERS = {"acme": "alice", "globex": "gina"}


def _start(tenant: str = "acme") -> dict:
    # Left pending for `park`: queued far ahead, so no worker's look (the sweep's included)
    # takes it first.
    run_id = _started(tenant)
    Run.objects.filter(pk=run_id).update(queued_at=timezone.now() + timedelta(days=1))
    return {"run": run_id}


def _started(tenant: str) -> str:
    # Pending, claimed by `burst`'s drain as a worker's look would.
    settings.HARBOR_EXECUTOR = "manual"
    caller = caller_resolve(tenant=tenant, user=STARTERS[tenant], session="bench")
    run, _ = run_start(caller=caller, query="x", agent_id=ONE_GATE)
    return run.pk


def _park(run_id: str) -> dict:
    with events.atomic():
        run = Run.objects.locked().get(pk=run_id)
        move(run, RunStatus.RUNNING)
        pause_park(run=run, cause="hitl_approval", reason="approval_required", payload={}, step=1, tool="launch")
    return _timed(run_id)


def _burst() -> dict:
    run_id = _started("acme")
    drain()
    return _timed(run_id)


def _timed(run_id: str) -> dict:
    sequence, committed = _committed.pop(run_id)
    return {"run": run_id, "sequence": sequence, "committed": committed}


async def application(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    if scope["type"] == "http" and scope["path"] in (START_PATH, PARK_PATH, BURST_PATH):
        if scope["path"] == START_PATH:
            tenant = scope["query_string"].decode().removeprefix("tenant=") or "acme"
            answer = await sync_to_async(_start)(tenant)
        elif scope["path"] == PARK_PATH:
            answer = await sync_to_async(_park)(scope["query_string"].decode().removeprefix("run="))
        else:
            answer = await sync_to_async(_burst)()
        start: Any = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
        await send(start)
        await send({"type": "http.response.body", "body": json.dumps(answer).encode(), "more_body": False})
        return
    await harbor(scope, receive, send)
