"""Hostile remote agents for tests: real HTTP servers on loopback, in a thread of their own,
that speak just enough A2A (a card, JSON-RPC answers built from the SDK's own types) to be
called, and then misbehave as a test scripts them: trickle an answer a byte at a time, send
more than any cap, send calls elsewhere, or answer with another run's task."""

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf import json_format

from approvals.a2a.travel_desk.server import agent_card

Reply = Callable[[asyncio.StreamWriter], Awaitable[None]]
Script = Callable[[str, dict], Reply]  # (JSON-RPC method, params) -> how to answer


def task(task_id: str, context_id: str, state: "TaskState", *, message: str = "", artifact: str = "") -> dict:
    """A task as the wire carries it."""
    status = TaskStatus(state=state)
    if message:
        status.message.CopyFrom(Message(role=Role.ROLE_AGENT, message_id=f"{task_id}-m", parts=[Part(text=message)]))
    built = Task(id=task_id, context_id=context_id, status=status)
    if artifact:
        built.artifacts.append(Artifact(artifact_id=f"{task_id}-a", parts=[Part(text=artifact)]))
    return json_format.MessageToDict(built)


def answer(result: object) -> Reply:
    """A prompt, whole JSON-RPC answer."""
    return raw(json.dumps({"jsonrpc": "2.0", "id": "1", "result": result}).encode())


def raw(body: bytes, content_type: str = "application/json") -> Reply:
    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(_head(content_type, len(body)) + body)
        await writer.drain()

    return reply


def trickle(body: bytes = b"{" + b" " * 1_000_000 + b"}", every: float = 0.1) -> Reply:
    """The answer's length declared, then its body a byte at a time: a per-read timeout
    never fires, and the answer takes days."""

    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(_head("application/json", len(body)))
        for byte in body:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(every)

    return reply


def endless_stream(first: dict | None = None, every: float = 0.1) -> Reply:
    """A server-sent event stream (after `first`, a task, if given) of keep-alive comments that
    never ends: the stream is alive, and never says anything."""

    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(_head("text/event-stream", None))
        if first is not None:
            event = json.dumps({"jsonrpc": "2.0", "id": "1", "result": {"task": first}})
            writer.write(f"data: {event}\n\n".encode())
        while True:
            writer.write(b": still here\n\n")
            await writer.drain()
            await asyncio.sleep(every)

    return reply


def flood(total: int, *, declared: bool) -> Reply:
    """`total` bytes of answer, its length declared up front or not (read until it ends)."""

    async def reply(writer: asyncio.StreamWriter) -> None:
        head = _head("application/json", total if declared else None)
        writer.write(head + b'{"jsonrpc": "2.0", "id": "1", "result": {"tasks": [], "x": "')
        chunk = b"x" * 65536
        for _ in range(total // len(chunk)):
            writer.write(chunk)
            await writer.drain()

    return reply


def _head(content_type: str, length: int | None) -> bytes:
    lines = ["HTTP/1.1 200 OK", f"Content-Type: {content_type}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    method: str = ""  # the JSON-RPC method, for a POST


@dataclass
class HostilePeer:
    """A remote agent at `url` that answers its card (which sends calls to `rpc_base`, its
    own origin unless told otherwise) and every JSON-RPC call as `script` says."""

    script: Script
    rpc_base: str = ""
    card: Callable[[str], Reply] | None = None  # how the card is answered, if not promptly
    streaming: bool = False  # what its card says
    seen: list[Request] = field(default_factory=list)
    url: str = ""

    def __enter__(self) -> "HostilePeer":
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait(5)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _shut(self) -> None:
        self._server.close()
        for handler in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            handler.cancel()

    def methods(self) -> list[str]:
        return [r.method for r in self.seen if r.method]

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            verb, path, _ = head.split("\r\n")[0].split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in head.split("\r\n")[1:] if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if verb == "GET":
                self.seen.append(Request(path, headers))
                reply = self.card(path) if self.card else self._card()
            else:
                rpc = json.loads(body)
                self.seen.append(Request(path, headers, rpc["method"]))
                reply = self.script(rpc["method"], rpc.get("params", {}))
            await reply(writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _card(self) -> Reply:
        card = agent_card(self.rpc_base or self.url, streaming=self.streaming)
        return raw(json.dumps(json_format.MessageToDict(card)).encode())
