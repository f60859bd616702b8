"""Cancelling our run cancels the remote task: when a parked run is cancelled or its pause
times out, when a cancel reaches an answered call before it goes on, and when a call in
flight is interrupted or gives up waiting. Each cancel is an outbox message written in the
transaction that ends the call, delivered after it commits and retried with backoff while
the agent is down (dead, and redeliverable, in the admin after that): none is lost to an
agent's restart, and none is sent for a change that rolled back."""

from a2a.utils.errors import (
    InvalidParamsError,
    MethodNotFoundError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from django.db import transaction

import outbox
from approvals.models import Pause
from runs.models import Run
from runs.runtime.ledger import call_key

from . import bridge, wire
from .directory import RemoteAgent, UnknownRemoteAgent, remote_agent_for

KIND = "a2a.cancel"
# Answers that no retry changes: the agent cannot cancel at all.
REFUSED_FOR_GOOD = (UnsupportedOperationError, MethodNotFoundError, InvalidParamsError)


def cancel_remote_on_commit(tenant_id: int, tool_context: dict | None, *, call: str | None = None) -> None:
    """For a parked a2a call ending (cancel, timeout): owe its remote task's cancel, in the
    current transaction, delivered once it commits. With `call` (an idempotency key), only
    that call's remote task."""
    state = (tool_context or {}).get("a2a") or {}
    if not state.get("task_id") or (call is not None and state.get("call") != call):
        return
    _owe_cancel(tenant_id, state)


def cancel_parked_on_commit(pause: Pause) -> None:
    """A parked a2a call's pause closed without a decision (cancel, timeout, a denied
    sign-in): its remote task ends with ours."""
    cancel_remote_on_commit(pause.tenant_id, pause.tool_context)


def cancel_pending_call_on_commit(run: Run) -> None:
    """A running run cancelled while its call waits to run (again): a remote task the call
    began before (its question answered, then the cancel came first) ends with the run, as
    a parked one's does."""
    pending = run.checkpoint.get("pending_call")
    if pending is not None:
        state = (run.checkpoint.get("tool_context") or {}).get("state")
        cancel_remote_on_commit(run.tenant_id, state, call=call_key(run.pk, pending.get("step", 0)))


def cancel_remote_soon(tenant_id: int, state: dict) -> None:
    """From a call in flight, outside any transaction of its own (a hard cancel, a task that
    never settled): owe the cancel in a transaction of its own. The task may not be known
    yet (the send was in flight): it is then found by the call's context."""
    with transaction.atomic():
        _owe_cancel(tenant_id, state)


def _owe_cancel(tenant_id: int, state: dict) -> None:
    context_id, task_id = state.get("context_id", ""), state.get("task_id") or ""
    # The call's context names its one remote task from the first send on, whether or not
    # the task's id is known yet: one cancel per call, however many paths owe it.
    outbox.enqueue(
        KIND,
        key=context_id or task_id,
        payload={
            "tenant": tenant_id,
            "agent": state["agent"],
            "card_url": state["card_url"],  # the agent's credential is read at delivery, never stored here
            "task_id": task_id,
            "context_id": context_id,
        },
    )


def deliver_cancel(delivery: outbox.Delivery) -> None:
    """The outbox's handler: one attempt at cancelling the remote task. A task already over,
    or unknown to its agent, needs no cancel; a transport failure is retried by the outbox."""
    payload = delivery.payload
    try:
        agent = remote_agent_for(payload["tenant"], payload["agent"])
    except UnknownRemoteAgent:  # removed since: its address is all we have
        agent = RemoteAgent(name=payload["agent"], card_url=payload["card_url"])
    try:
        cancel_remote_task(agent, payload["task_id"], context_id=payload["context_id"])
    except REFUSED_FOR_GOOD as error:
        raise outbox.PermanentFailure(f"remote agent {agent.name} cannot cancel: {error}") from error


def cancel_remote_task(agent: RemoteAgent, task_id: str, *, context_id: str = "") -> str:
    """One attempt at cancelling the remote task (found by its context when the send was
    still in flight). Returns the remote state after it; "" when no task was ever started
    or its agent no longer knows it. Transport failures are raised."""
    if not task_id and context_id:
        found = bridge.call(wire.find_in_context(agent, context_id))
        task_id = found.task_id if found else ""
    if not task_id:
        return ""
    try:
        current = bridge.call(wire.get(agent, task_id))
        if current.state in wire.TERMINAL:
            return current.state
        return bridge.call(wire.cancel(agent, task_id)).state
    except TaskNotCancelableError:  # it ended between the look and the cancel
        return bridge.call(wire.get(agent, task_id)).state
    except TaskNotFoundError:
        return ""
