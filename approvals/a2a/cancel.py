"""Cancelling our run cancels the remote task: at a hard cancel of the call in flight, and
when a parked run is cancelled or its pause times out (after the commit, off the request)."""

import logging
import threading

from django.db import transaction

from runs.models import Run
from runs.runtime.ledger import call_key

from . import bridge, wire
from .directory import RemoteAgent, UnknownRemoteAgent, remote_agent_for
from .retry import with_retries

log = logging.getLogger("harbor.a2a")
WAIT_SECONDS = 15.0
# A cancel runs off the run's path, so it can wait out an agent's restart: 12 attempts are
# about a minute of backoff (0.5 s, 1 s, 2 s, 4 s, then every 8 s).
CANCEL_ATTEMPTS = 12


def cancel_remote_task(agent: RemoteAgent, task_id: str, *, context_id: str = "", attempts: int = 0) -> str:
    """Cancel the remote task (found by its context when the send was still in flight).
    Returns the remote state, or "" when there was nothing to cancel or it failed (logged).
    `attempts`: per remote call, if not HARBOR_A2A_ATTEMPTS."""
    try:
        if not task_id and context_id:
            found = with_retries(
                agent.name, lambda: bridge.call(wire.find_in_context(agent, context_id)), sleep=_nap, total=attempts
            )
            task_id = found.task_id if found else ""
        if not task_id:
            return ""
        current = with_retries(agent.name, lambda: bridge.call(wire.get(agent, task_id)), sleep=_nap, total=attempts)
        if current.state in wire.TERMINAL:
            return current.state
        return with_retries(
            agent.name, lambda: bridge.call(wire.cancel(agent, task_id)), sleep=_nap, total=attempts
        ).state
    except Exception as error:  # a cancel is best effort: the run is over either way
        log.warning("could not cancel remote task %s at %s: %s", task_id, agent.name, error)
        return ""


def cancel_remote_on_commit(tenant_id: int, tool_context: dict | None, *, call: str | None = None) -> None:
    """For a parked a2a call ending (cancel, timeout): cancel its remote task once the
    transaction has committed, in a thread of its own (never inside a lock or a request).
    With `call` (an idempotency key), only that call's remote task."""
    state = (tool_context or {}).get("a2a") or {}
    if not state.get("task_id") or (call is not None and state.get("call") != call):
        return
    try:
        agent = remote_agent_for(tenant_id, state["agent"])
    except UnknownRemoteAgent:
        agent = RemoteAgent(name=state["agent"], card_url=state["card_url"])
    task_id = state["task_id"]

    def start() -> None:
        threading.Thread(
            target=cancel_remote_task,
            args=(agent, task_id),
            kwargs={"attempts": CANCEL_ATTEMPTS},
            name="harbor-a2a-cancel",
            daemon=True,
        ).start()

    transaction.on_commit(start)


def cancel_pending_call_on_commit(run: Run) -> None:
    """A running run cancelled while its call waits to run (again): a remote task the call
    began before (its question answered, then the cancel came first) ends with the run, as
    a parked one's does."""
    pending = run.checkpoint.get("pending_call")
    if pending is not None:
        state = (run.checkpoint.get("tool_context") or {}).get("state")
        cancel_remote_on_commit(run.tenant_id, state, call=call_key(run.pk, pending.get("step", 0)))


def _nap(seconds: float) -> None:
    threading.Event().wait(seconds)
