"""The A2A wire, through the official SDK: the agent card from its well-known address, a
client from the SDK's factory, and the four calls the delegation needs (send, get, find by
context, cancel). Streams where the card offers streaming, polls where it does not."""

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH

from approvals.capped_http import CappedTransport

from . import limits
from .capped import ResponseTooLarge
from .directory import RemoteAgent
from .failures import RemoteAgentFailed
from .origin import OriginBoundAuth, check_card

T = TypeVar("T")
POLL_SECONDS = 0.2

STATE_NAMES = {
    TaskState.TASK_STATE_SUBMITTED: "submitted",
    TaskState.TASK_STATE_WORKING: "working",
    TaskState.TASK_STATE_INPUT_REQUIRED: "input-required",
    TaskState.TASK_STATE_AUTH_REQUIRED: "auth-required",
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_REJECTED: "rejected",
    TaskState.TASK_STATE_CANCELED: "canceled",
}
INTERRUPTED = frozenset({"input-required", "auth-required"})
# An auth-required status may name, in its message's metadata, the OAuth source whose
# access token would answer it (approvals.a2a.auth_leg).
OAUTH_SOURCE_KEY = "oauth_source"
TERMINAL = frozenset({"completed", "failed", "rejected", "canceled"})


@dataclass(frozen=True)
class RemoteTask:
    """What the delegation needs of a remote task: plain values, never SDK objects."""

    task_id: str
    context_id: str
    state: str
    message: str = ""  # the text of the status message (the question, the failure)
    artifact: str = ""  # the text of every artifact, joined
    message_ids: tuple[str, ...] = ()  # of the messages in the task's history
    oauth_source: str = ""  # an auth-required status's named OAuth source (its metadata)

    @property
    def settled(self) -> bool:
        return self.state in INTERRUPTED or self.state in TERMINAL


def remote_task(task: Task) -> RemoteTask:
    # What a person reads or a run answers with is cut to HARBOR_A2A_MAX_TEXT_BYTES, saying so.
    status_text = limits.bounded_text(" ".join(part.text for part in task.status.message.parts if part.text))
    artifact = limits.bounded_text(
        "\n".join(part.text for artifact in task.artifacts for part in artifact.parts if part.text)
    )
    return RemoteTask(
        task_id=task.id,
        context_id=task.context_id,
        state=STATE_NAMES.get(task.status.state, "unknown"),
        message=status_text,
        artifact=artifact,
        message_ids=tuple(message.message_id for message in task.history),
        oauth_source=_named_source(task),
    )


def _named_source(task: Task) -> str:
    metadata = task.status.message.metadata
    named = metadata[OAUTH_SOURCE_KEY] if OAUTH_SOURCE_KEY in metadata else ""
    return named if isinstance(named, str) else ""


def _card_address(card_url: str) -> tuple[str, str]:
    """A configured address is the agent's base URL or the full URL of its card."""
    parts = urlsplit(card_url)
    if parts.path.endswith(".json"):
        return f"{parts.scheme}://{parts.netloc}", parts.path
    return card_url.rstrip("/"), AGENT_CARD_WELL_KNOWN_PATH


@asynccontextmanager
async def connect(agent: RemoteAgent) -> AsyncIterator[tuple[Client, bool]]:
    """A client for `agent` and whether it streams, from its card, via the SDK's factory:
    every response read through the byte cap, the credential sent to the card's origin
    only, and a card that sends calls elsewhere refused."""
    base, path = _card_address(agent.card_url)
    card_url = httpx.URL(base + path)
    auth = OriginBoundAuth(agent.auth_header, card_url) if agent.auth_header else None
    timeout = httpx.Timeout(limits.call_seconds(), connect=limits.connect_seconds())
    transport = CappedTransport(limits.max_response_bytes(), ResponseTooLarge)
    async with httpx.AsyncClient(auth=auth, timeout=timeout, transport=transport) as http:
        card = await _bounded(agent, A2ACardResolver(http, base, path).get_agent_card())
        check_card(card, card_url, agent.name)
        streaming = bool(card.capabilities.streaming)
        config = ClientConfig(httpx_client=http, streaming=streaming, polling=not streaming)
        client = ClientFactory(config).create(card)
        try:
            yield client, streaming
        finally:
            await client.close()


class RemoteStalled(RemoteAgentFailed):
    """The remote task stayed unsettled (submitted or working) past the time a call waits."""


class RemoteTooSlow(RemoteAgentFailed):
    """One call to the remote agent took longer in all than HARBOR_A2A_CALL_SECONDS."""


class RemoteForged(RemoteAgentFailed):
    """The remote agent answered with a task that is not this call's (another task or context)."""


def settle_seconds() -> float:
    """How long a call waits for its remote task to settle (HARBOR_A2A_SETTLE_SECONDS, 15
    minutes by default): a task left working for ever (its agent restarted and dropped the
    work) fails the call loudly instead of holding the run."""
    return float(os.environ.get("HARBOR_A2A_SETTLE_SECONDS", "900"))


async def _bounded(agent: RemoteAgent, call: Awaitable[T]) -> T:
    """`call` within HARBOR_A2A_CALL_SECONDS in all: a per-read timeout alone lets an agent
    that trickles a byte at a time hold the call for ever."""
    seconds = limits.call_seconds()
    try:
        async with asyncio.timeout(seconds):
            return await call
    except TimeoutError:
        raise RemoteTooSlow(f"remote agent {agent.name} did not answer within {seconds:g} s") from None


async def _settled(agent: RemoteAgent, waiting: Awaitable[RemoteTask]) -> RemoteTask:
    seconds = settle_seconds()
    try:
        async with asyncio.timeout(seconds):
            return await waiting
    except TimeoutError:
        raise RemoteStalled(f"remote agent {agent.name}: its task did not settle in {seconds:g} s") from None


def _owned(agent: RemoteAgent, task: RemoteTask, *, context_id: str = "", task_id: str = "") -> RemoteTask:
    """`task` if it is the one this call holds (its context; its id once known), else
    RemoteForged: an agent answering with another run's task must not settle this one."""
    if (context_id and task.context_id != context_id) or (task_id and task.task_id != task_id):
        raise RemoteForged(
            f"remote agent {agent.name} answered with task {task.task_id!r} in context {task.context_id!r},"
            f" not this call's ({'task ' + repr(task_id) + ' in ' if task_id else ''}context {context_id!r}); refused"
        )
    return task


async def send(agent: RemoteAgent, *, text: str, context_id: str, message_id: str, task_id: str = "") -> RemoteTask:
    """Send one text message (a new task in `context_id`, or more input on `task_id`) and
    follow the task until it settles: interrupted (input or auth required) or terminal."""
    sent = await _settled(agent, _send(agent, text=text, context_id=context_id, message_id=message_id, task_id=task_id))
    return _owned(agent, sent, context_id=context_id, task_id=task_id)


async def _send(agent: RemoteAgent, *, text: str, context_id: str, message_id: str, task_id: str) -> RemoteTask:
    message = Message(role=Role.ROLE_USER, message_id=message_id, context_id=context_id, parts=[Part(text=text)])
    if task_id:
        message.task_id = task_id
    async with connect(agent) as (client, _streaming):
        seen: list[RemoteTask] = []
        try:
            # The send and the stream it answers with are one call: bounded in all. A task
            # still working at the bound is then polled, each look bounded again.
            async with asyncio.timeout(limits.call_seconds()):
                settled = await _answer(agent, client, SendMessageRequest(message=message), seen)
        except TimeoutError:
            if not seen:
                raise RemoteTooSlow(
                    f"remote agent {agent.name} did not answer within {limits.call_seconds():g} s"
                ) from None
            settled = None
        if settled is not None:
            return settled
        latest = _owned(agent, seen[-1], context_id=context_id, task_id=task_id)
        return await _poll(agent, client, latest.task_id)


async def _answer(agent: RemoteAgent, client: Client, request: SendMessageRequest, seen: list) -> RemoteTask | None:
    """The task the send's answer settles on, or None (the answer ended with it unsettled);
    every task seen on the way is appended to `seen`."""
    async for event in client.send_message(request):
        if event.HasField("task"):
            seen.append(remote_task(event.task))
        elif event.HasField("status_update") or event.HasField("artifact_update"):
            # Status and artifact updates are deltas: the settled task is read back whole.
            update = event.status_update if event.HasField("status_update") else event.artifact_update
            state = STATE_NAMES.get(event.status_update.status.state, "") if event.HasField("status_update") else ""
            if state in INTERRUPTED or state in TERMINAL:
                return await _get(agent, client, update.task_id)
        elif event.HasField("message"):
            raise RemoteGarbage("the remote agent answered with a message, not a task")
        if seen and seen[-1].settled:
            return seen[-1]
    if not seen:
        raise RemoteGarbage("the remote agent answered with no task")
    return None


async def _get(agent: RemoteAgent, client: Client, task_id: str) -> RemoteTask:
    task = remote_task(await _bounded(agent, client.get_task(GetTaskRequest(id=task_id))))
    return _owned(agent, task, task_id=task_id)


async def _poll(agent: RemoteAgent, client: Client, task_id: str) -> RemoteTask:
    while True:
        task = await _get(agent, client, task_id)
        if task.settled:
            return task
        await asyncio.sleep(POLL_SECONDS)


async def follow(agent: RemoteAgent, task_id: str, *, context_id: str = "") -> RemoteTask:
    """Wait, by polling, until a task we already sent settles (a retry never re-sends)."""

    async def polled() -> RemoteTask:
        async with connect(agent) as (client, _):
            return await _poll(agent, client, task_id)

    return _owned(agent, await _settled(agent, polled()), context_id=context_id, task_id=task_id)


async def get(agent: RemoteAgent, task_id: str, *, context_id: str = "") -> RemoteTask:
    async def look() -> RemoteTask:
        async with connect(agent) as (client, _):
            return await _get(agent, client, task_id)

    return _owned(agent, await _bounded(agent, look()), context_id=context_id)


async def find_in_context(agent: RemoteAgent, context_id: str) -> RemoteTask | None:
    """The task already started in `context_id`, if any (an earlier attempt's send landed)."""

    async def listed() -> RemoteTask | None:
        async with connect(agent) as (client, _):
            page = await client.list_tasks(ListTasksRequest(context_id=context_id, history_length=50))
            return remote_task(page.tasks[0]) if page.tasks else None

    found = await _bounded(agent, listed())
    return _owned(agent, found, context_id=context_id) if found is not None else None


async def cancel(agent: RemoteAgent, task_id: str) -> RemoteTask:
    async def cancelled() -> RemoteTask:
        async with connect(agent) as (client, _):
            return remote_task(await client.cancel_task(CancelTaskRequest(id=task_id)))

    return _owned(agent, await _bounded(agent, cancelled()), task_id=task_id)


def stable_id(*parts: str) -> str:
    """A message or context id derived from the call's idempotency key: the same call on
    any worker, at any attempt, names the same remote conversation."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "harbor-a2a:" + ":".join(parts)))


class RemoteGarbage(Exception):
    """The remote answered, but not as an A2A agent does."""
