"""Live pushes: after a commit, the events it wrote are handed to their tenant's live streams
(Redis pub/sub where configured, else the channel layer), once per write. Best effort: a
push is a nudge, and a stream that misses one reads the log."""

import asyncio
import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from approvals.models import Pause
from runs.domain import pubsub
from runs.domain.envelopes import SIGN_IN_KEYS, envelope
from runs.domain.tokens import SIGN_IN_SEALED
from runs.models import Event

log = logging.getLogger("harbor.events")

Pushed = tuple[Event, "Pause | None"]  # an event as written, and the pause it names


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


def user_group(user_id: int) -> str:
    """Every live stream of one person, so a logout or a revoked membership closes them."""
    return f"user.{user_id}"


def _published(event: Event, pause: Pause | None) -> dict:
    """What the live streams need to deliver an event without reading the database: its
    envelope (tokens left out, the tenant filled in by the receiver) and the inputs of the
    visibility rule (runs.identity.visibility.Viewer): the run's owner and, for a pause
    event, the pausing identity, the cause and the sealed token (and sign-in)."""
    keys = cast(list[str], event.payload.get("_token_keys", []))
    return {
        "envelope": envelope(event, tenant_slug="", with_tokens=False),
        "owner": event.run.owner_id,
        "pause": None
        if pause is None
        else {
            "id": pause.pk,
            "user": pause.identity_user,
            "session": pause.identity_session,
            "cause": pause.cause,
            "sealed": pause.token_sealed,
            "keys": keys,
            "sign_in": _sealed_sign_in(pause, keys),
        },
    }


# The ASGI server's event loop, once known. The in-memory channel layer lives on that
# loop, so pushes from runtime threads are handed to it rather than run on a loop of
# their own.
_server_loop: asyncio.AbstractEventLoop | None = None


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Note the server's loop: True the first time (the embedded runtime starts then)."""
    global _server_loop
    if _server_loop is not None:
        return False
    _server_loop = loop
    return True


# A push waits at most this long for the channel layer, and after a failure (not a mere
# timeout) pushes are skipped for a moment: a request never stalls on a Redis outage, and
# readers poll the log.
PUSH_TIMEOUT_SECONDS = 0.5
PUSH_BACKOFF_SECONDS = 2.0
_push_paused_until = 0.0


def push(tenant_id: int, written: list[Pushed]) -> None:
    """Hand the written events to the tenant's live streams, once per write. Websockets
    deliver them from the message (no database read) when it follows their cursor, and
    read the log otherwise; the SSE stream takes it as a nudge. A lost push only delays a
    stream until its next read of the log. The message is built only for a layer that may
    have listeners."""
    if not written:
        return
    group = tenant_group(tenant_id)

    def message() -> dict:
        return {
            "type": "harbor.events",
            "group": group,  # each process hands it to its streams of this group (streams.Hub)
            "first": written[0][0].sequence,
            "sequence": written[-1][0].sequence,
            "runs": sorted({event.run_id for event, _ in written}),
            "events": [_published(event, pause) for event, pause in written],
        }

    _group_send([(group, message)])


def _sealed_sign_in(pause: "Pause", keys: list[str]) -> str | None:
    """A pushed pause event's sign-in, sealed as its token is (the push crosses Redis): as
    the pause keeps it."""
    return pause.payload.get(SIGN_IN_SEALED) if any(key in SIGN_IN_KEYS for key in keys) else None


def close_streams(*, user_id: int, tenant_id: int | None = None, login: str | None = None) -> None:
    """Close a person's live streams (of one tenant, or of one login session, named by its
    label, runs.identity.sessions.login_label, when given)."""
    group = user_group(user_id)
    _group_send([(group, lambda: {"type": "harbor.close", "group": group, "tenant": tenant_id, "login": login})])


Send = tuple[Any, str, dict]  # the layer, the group, the message


class _Sender:
    """The pushes handed to one event loop, sent one after another in the order they were
    handed over. A thread hands one over with a single wake-up of the loop (none while a
    send is under way: the running one takes it along), not a task, future and timer each:
    on the runtime's threads a push cost more CPU than its two Redis round trips."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: deque[Send] = deque()
        self.lock = threading.Lock()
        self.idle = threading.Event()
        self.idle.set()

    def put(self, sends: list[Send]) -> None:
        with self.lock:
            self.queue.extend(sends)
            if not self.idle.is_set():
                return  # the running send takes these along
            self.idle.clear()
        try:
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self._send_all()))
        except RuntimeError:  # the loop closed meanwhile (a server shutting down)
            with self.lock:
                self.queue.clear()
                self.idle.set()
            raise

    def _next(self) -> Send | None:
        with self.lock:
            if self.queue:
                return self.queue.popleft()
            self.idle.set()
            return None

    async def _send_all(self) -> None:
        while (send := self._next()) is not None:
            if not await _send_one(*send):
                with self.lock:  # events queued behind it: their streams catch up from the log
                    self.queue = deque(kept for kept in self.queue if kept[2]["type"] != "harbor.events")


async def _send_one(layer: Any, group: str, message: dict) -> bool:
    """Whether the layer took the message (after a failure or a timeout, the events queued
    behind it are dropped rather than each wait its turn; a stream's close is not)."""
    global _push_paused_until
    try:
        async with asyncio.timeout(PUSH_TIMEOUT_SECONDS):
            await layer.group_send(group, message)
        return True
    except TimeoutError:
        # A busy loop as often as a hung layer: skipping the next pushes too would only turn
        # every open socket into a reader.
        log.warning("live push to %s timed out; readers catch up from the log", group)
    except (Exception, asyncio.CancelledError):
        _push_paused_until = time.monotonic() + PUSH_BACKOFF_SECONDS
        log.warning("live push to %s failed; readers catch up from the log", group, exc_info=True)
    return False


async def _send_each(sends: list[Send]) -> None:
    for send in sends:
        if not await _send_one(*send):
            return


# One sender per loop: the server's (Daphne: its layer lives there) or, in a process without
# one (a Celery worker, a command), a long-lived loop of its own, so its Redis connections
# are reused instead of a new thread, loop and connection per push.
_senders: dict[asyncio.AbstractEventLoop, _Sender] = {}
_own_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
_senders_lock = threading.Lock()


def _sender() -> _Sender:
    global _own_loop
    loop = _server_loop
    with _senders_lock:
        if loop is None or not loop.is_running():
            if _own_loop is None or _own_loop[0] != os.getpid():  # a forked worker starts its own
                own = asyncio.new_event_loop()
                threading.Thread(target=own.run_forever, name="harbor-push", daemon=True).start()
                _own_loop = (os.getpid(), own)
                atexit.register(_finish_pushes)
            loop = _own_loop[1]
        if loop not in _senders:
            _senders[loop] = _Sender(loop)
        return _senders[loop]


def _finish_pushes() -> None:
    """A short-lived process (a management command, a script) sends what it committed
    before it exits, rather than leaving open inboxes to wait for their next read."""
    if _own_loop is not None and (sender := _senders.get(_own_loop[1])) is not None:
        sender.idle.wait(PUSH_TIMEOUT_SECONDS)


def _group_send(groups: list[tuple[str, Callable[[], dict]]]) -> None:
    """Send each group its message, built here (on the in-memory layer, nobody listening
    costs nothing, not even the message). Best effort, never raises: it runs after commit,
    and a live push never undoes a committed change. Over Redis pub/sub it is one PUBLISH
    on this thread (waiting at most pubsub.SEND_TIMEOUT_SECONDS); through a layer it never waits."""
    global _push_paused_until
    if time.monotonic() < _push_paused_until:
        return
    if url := pubsub.redis_url():
        try:
            pubsub.publish(url, [(group, build()) for group, build in groups])
        except Exception:
            _push_paused_until = time.monotonic() + PUSH_BACKOFF_SECONDS
            log.warning("live push to %s failed; readers catch up from the log", [g for g, _ in groups], exc_info=True)
        return
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        if isinstance(layer, InMemoryChannelLayer):
            groups = [(group, build) for group, build in groups if layer.groups.get(group)]
        sends = [(layer, group, build()) for group, build in groups]
        if not sends:
            return
        if isinstance(layer, InMemoryChannelLayer) and not (_server_loop and _server_loop.is_running()):
            async_to_sync(_send_each)(sends)  # its queues belong to the caller's loop
        else:
            _sender().put(sends)
    except (Exception, asyncio.CancelledError):
        log.warning("live push to %s failed", [group for group, _ in groups], exc_info=True)
