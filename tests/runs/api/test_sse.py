"""GET /v1/events (PROTOCOL §5) against a live Daphne server, with a real HTTP client:
replay after Last-Event-ID, then the live tail, exactly once and in order."""

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from .conftest import mint


def _headers(user="alice", session="s1", scopes=(), **extra) -> dict:
    return {"Authorization": f"Bearer {mint(user, session, scopes=scopes)}", "Accept": "text/event-stream", **extra}


def _post(live, path, body, user="alice"):
    response = httpx.post(f"{live.url}{path}", json=body, headers=_headers(user), timeout=20)
    assert response.status_code == 200, response.text
    return response.json()


def read_events(
    live, headers, *, until=None, limit=None, idle=20.0, into=None, params=None
) -> tuple[list[str], list[dict]]:
    """Open a stream and read frames until `until(event)` holds, `limit` events arrived, or
    nothing arrived for `idle` seconds. Returns the raw prelude lines and the events (also
    appended to `into` as they arrive)."""
    prelude: list[str] = []
    events: list[dict] = [] if into is None else into
    frame: dict[str, Any] = {}
    try:
        with httpx.stream(
            "GET", f"{live.url}/v1/events", headers=headers, params=params, timeout=httpx.Timeout(10, read=idle)
        ) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if not events and not frame and (line.startswith("retry:") or line.startswith(":")):
                    prelude.append(line)
                if line.startswith("event: "):
                    frame["event"] = line[7:]
                elif line.startswith("id: "):
                    frame["id"] = int(line[4:])
                elif line.startswith("data: "):
                    frame["data"] = json.loads(line[6:])
                elif line == "" and frame:
                    events.append(frame)
                    assert frame["event"] == frame["data"]["type"] and frame["id"] == frame["data"]["sequence"]
                    frame = {}
                    if (until and until(events[-1])) or (limit and len(events) >= limit):
                        break
    except httpx.ReadTimeout:
        pass
    return prelude, events


def _wait_status(live, run, statuses, timeout=60, as_user="alice"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = _post(live, "/v1/tasks/get", {"identity": {"run": run}}, user=as_user)
        if task["status"] in statuses:
            return task
        time.sleep(0.2)
    raise AssertionError(f"run {run} never reached {statuses}")


def test_a_reconnecting_client_gets_every_missed_event_exactly_once_in_order(live_harbor):
    run = _post(live_harbor, "/v1/control/start", {"identity": {}, "query": "count to 12", "agent_id": "countdown"})[
        "task_id"
    ]
    done = lambda e: e["event"] == "task.completed"  # noqa: E731

    prelude, first = read_events(live_harbor, _headers(**{"X-Harbor-Run": run, "Last-Event-ID": "0"}), limit=6)
    assert prelude[0] == "retry: 3000"
    assert len(first) == 6 and first[0]["event"] == "task.spawned"
    # Disconnected; the run goes on without us.
    _wait_status(live_harbor, run, {"complete"})
    _, second = read_events(
        live_harbor, _headers(**{"X-Harbor-Run": run, "Last-Event-ID": str(first[-1]["id"])}), until=done
    )
    _, everything = read_events(live_harbor, _headers(**{"X-Harbor-Run": run, "Last-Event-ID": "0"}), until=done)

    received = [e["id"] for e in first + second]
    assert received == [e["id"] for e in everything]  # every event, once, in order
    assert received == sorted(set(received))
    assert second[-1]["event"] == "task.completed" and all(e["data"]["run"] == run for e in everything)
    envelope = everything[0]["data"]
    assert set(envelope) == {"type", "sequence", "occurred_at", "tenant", "user", "session", "run", "payload"}
    assert (envelope["tenant"], envelope["user"], envelope["session"]) == ("acme", "alice", "s1")


def test_the_live_tail_delivers_new_events_and_filters_by_type(live_harbor):
    results: dict[str, Any] = {}

    def listen():
        results["events"] = read_events(
            live_harbor,
            _headers(**{"X-Harbor-Event-Type": "task.started,task.completed"}),
            until=lambda e: e["event"] == "task.completed" and e["data"]["run"] == results.get("run"),
        )[1]

    import threading

    listener = threading.Thread(target=listen)
    listener.start()
    time.sleep(1.0)  # the stream is open and tailing (no Last-Event-ID: only new events)
    results["run"] = _post(
        live_harbor, "/v1/control/start", {"identity": {}, "query": "count to 2", "agent_id": "countdown"}
    )["task_id"]
    listener.join(60)
    mine = [e for e in results["events"] if e["data"]["run"] == results["run"]]
    assert [e["event"] for e in mine] == ["task.started", "task.completed"]
    assert {e["event"] for e in results["events"]} == {"task.started", "task.completed"}


def test_a_cursor_past_the_head_starts_at_the_head(live_harbor):
    """A client that saw a longer log (reset since) hears what comes next, rather than
    nothing until the log grows past its Last-Event-ID."""
    import threading

    results: dict[str, Any] = {}
    headers = _headers(**{"Last-Event-ID": str(10**17), "X-Harbor-Event-Type": "task.completed"})
    listener = threading.Thread(
        target=lambda: results.update(events=read_events(live_harbor, headers, idle=10, until=lambda e: True)[1])
    )
    listener.start()
    time.sleep(1.0)  # the stream is open and tailing
    run = _post(live_harbor, "/v1/control/start", {"identity": {}, "query": "count to 1", "agent_id": "countdown"})[
        "task_id"
    ]
    listener.join(60)
    assert [(e["event"], e["data"]["run"]) for e in results["events"]] == [("task.completed", run)]


def test_the_stream_is_filtered_to_what_the_caller_may_see(live_harbor):
    run = _post(live_harbor, "/v1/control/start", {"identity": {}, "query": "count to 1", "agent_id": "countdown"})[
        "task_id"
    ]
    _wait_status(live_harbor, run, {"complete"})
    # Each of them has a run of their own, so an empty stream cannot pass for a filtered one.
    ginas = _post(
        live_harbor, "/v1/control/start", {"identity": {}, "query": "count to 1", "agent_id": "countdown"}, user="gina"
    )
    nias = _post(
        live_harbor, "/v1/control/start", {"identity": {}, "query": "count to 1", "agent_id": "countdown"}, user="nia"
    )
    _wait_status(live_harbor, ginas["task_id"], {"complete"}, as_user="gina")
    _wait_status(live_harbor, nias["task_id"], {"complete"}, as_user="nia")
    _, seen_by_gina = read_events(live_harbor, _headers("gina", **{"Last-Event-ID": "0"}), idle=2)
    assert ginas["task_id"] in {e["data"]["run"] for e in seen_by_gina}
    assert {e["data"]["tenant"] for e in seen_by_gina} == {"globex"}
    _, seen_by_newcomer = read_events(live_harbor, _headers("nia", **{"Last-Event-ID": "0"}), idle=2)
    assert {e["data"]["run"] for e in seen_by_newcomer} == {nias["task_id"]}  # a fresh member sees only their own
    _, seen_by_approver = read_events(
        live_harbor,
        _headers("bob", **{"Last-Event-ID": "0", "X-Harbor-Run": run}),
        until=lambda e: e["event"] == "task.completed",
    )
    assert seen_by_approver[-1]["data"]["run"] == run


@pytest.mark.parametrize(
    "user, headers, params, status, code",
    [
        (None, {}, {}, 401, "identity_required"),
        ("alice", {"Last-Event-ID": "soon"}, {}, 400, "invalid_request"),
        ("alice", {"Last-Event-ID": b"\xb2"}, {}, 400, "invalid_request"),  # a superscript digit, not a sequence
        ("alice", {"Last-Event-ID": "\u0661".encode()}, {}, 400, "invalid_request"),
        ("alice", {}, {"admin": "1"}, 403, "identity_scope_required"),
    ],
)
def test_a_stream_that_cannot_open_answers_json(live_harbor, user, headers, params, status, code):
    all_headers = {**(_headers(user) if user else {}), **headers}
    response = httpx.get(f"{live_harbor.url}/v1/events", headers=all_headers, params=params, timeout=10)
    assert (response.status_code, response.json()["code"]) == (status, code)


def test_a_run_the_caller_cannot_see_yields_an_empty_stream(live_harbor):
    """As in Harbor: 200 and no events, whether the run is unknown, of another tenant, or
    of another member; nothing tells them apart."""
    run = _post(live_harbor, "/v1/control/start", {"identity": {}, "query": "count to 1", "agent_id": "countdown"})[
        "task_id"
    ]
    _wait_status(live_harbor, run, {"complete"})
    for user, named in [("gina", run), ("mallory", run), ("alice", "01NOSUCHRUN")]:
        _, seen = read_events(live_harbor, _headers(user, **{"X-Harbor-Run": named, "Last-Event-ID": "0"}), idle=1.5)
        assert seen == []
    _, own = read_events(
        live_harbor,
        _headers(**{"X-Harbor-Run": run, "Last-Event-ID": "0"}),
        until=lambda e: e["event"] == "task.completed",
    )
    assert own and {e["data"]["run"] for e in own} == {run}


def test_the_stream_ends_when_the_token_expires(live_harbor):
    import threading

    headers = {"Authorization": f"Bearer {mint('alice', ttl=3)}", "Last-Event-ID": "0"}
    seen: list[dict] = []
    ended = threading.Event()

    def listen():
        try:
            read_events(live_harbor, headers, idle=20, into=seen)
        finally:
            ended.set()

    started = time.monotonic()
    threading.Thread(target=listen, daemon=True).start()
    assert ended.wait(10), "the stream outlived its token"
    assert seen and time.monotonic() - started > 2  # it streamed while the token was valid
    response = httpx.get(f"{live_harbor.url}/v1/events", headers=headers, timeout=10)
    assert (response.status_code, response.json()["code"]) == (401, "auth_rejected")


def test_a_revoked_member_is_sent_no_token_and_the_stream_ends(live_harbor):
    """rita's own run parks (an operator's pause) after her membership was revoked: the
    pause's token, which the decision rule would now refuse her, never reaches her stream."""
    import threading

    run = _post(
        live_harbor,
        "/v1/control/start",
        {"identity": {}, "query": "count to 200", "agent_id": "countdown"},
        user="rita",
    )["task_id"]
    got: list[dict] = []
    ended = threading.Event()

    def listen():
        try:
            read_events(live_harbor, _headers("rita", **{"Last-Event-ID": "0"}), idle=30, into=got)
        finally:
            ended.set()

    threading.Thread(target=listen, daemon=True).start()
    deadline = time.monotonic() + 30
    while not any(e["event"] == "tool.completed" for e in got):
        assert time.monotonic() < deadline and not ended.is_set(), "rita's stream never started"
        time.sleep(0.1)
    live_harbor.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        "from runs.models import Tenant; from runs.identity.permissions import membership_revoke; "
        "membership_revoke(tenant=Tenant.objects.get(slug='acme'), "
        "user=get_user_model().objects.get(username='rita'))",
    )
    revoked = time.monotonic()
    _post(live_harbor, "/v1/control/pause", {"identity": {"run": run}}, user="olivia")
    _wait_status(live_harbor, run, {"paused"}, as_user="olivia")
    assert ended.wait(20), "the stream outlived the membership"
    assert time.monotonic() - revoked < 20
    assert [e for e in got if e["data"]["payload"].get("Token") or e["data"]["payload"].get("PauseToken")] == []
    assert "pause.requested" not in [e["event"] for e in got]


def test_an_admin_streams_the_whole_tenant(live_harbor):
    bobs = _post(
        live_harbor, "/v1/control/start", {"identity": {}, "query": "count to 1", "agent_id": "countdown"}, user="bob"
    )
    _wait_status(live_harbor, bobs["task_id"], {"complete"}, as_user="bob")
    headers = {**_headers(scopes=["admin"]), "Last-Event-ID": "0"}
    _, seen = read_events(live_harbor, headers, params={"admin": "1"}, idle=2)
    assert bobs["task_id"] in {e["data"]["run"] for e in seen}  # another member's run, in alice's admin stream


def _plan(run_id=None):
    from types import SimpleNamespace

    return SimpleNamespace(expires_at=time.time() + 3600, run_id=run_id, tenant_id=1, tenant_slug="acme", types=None)


def _in_own_loop(coroutine):
    # A thread of its own: an earlier test (Playwright's sync API) may leave a loop running here.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_keepalive_comments_while_idle(settings):
    """The stream's loop on its own: an idle stream emits `: keepalive` comments."""
    from channels.layers import InMemoryChannelLayer

    from runs.protocol import sse
    from runs.streams.tail import Tail

    settings.HARBOR_SSE_KEEPALIVE_SECONDS = 0.05

    async def scenario():
        layer = InMemoryChannelLayer()
        tail = Tail(layer, await layer.new_channel("sse."))
        await tail.join("tenant.1")
        reads = []

        async def no_frames(plan, cursor):
            reads.append(cursor)
            return [], cursor, None

        original, sse.read_frames = sse.read_frames, no_frames
        try:
            stream = sse._frames(_plan(), tail, 7)
            chunks = [await stream.__anext__() for _ in range(3)]
            await stream.aclose()
        finally:
            sse.read_frames = original
        return chunks, reads, layer

    chunks, reads, layer = _in_own_loop(scenario())
    assert chunks == ["retry: 3000\n\n", ": keepalive\n\n", ": keepalive\n\n"]
    assert reads[:2] == [7, 7]  # every keepalive also re-reads the log (a lost push costs nothing)
    assert not layer.groups.get("tenant.1")  # the stream left its group when it closed


@pytest.mark.parametrize("transport", ["pubsub", "channel layer"])
def test_the_live_tail_survives_a_redis_restart(settings, transport):
    """Redis goes away mid-stream: the stream keeps serving the log by polling, then re-joins
    its group when Redis is back, so a live nudge wakes it again."""
    import shutil

    if not shutil.which("redis-server"):
        pytest.skip("needs redis-server")
    from channels_redis.core import RedisChannelLayer

    from runs.domain import pubsub
    from runs.protocol import sse
    from runs.streams.tail import Tail
    from tests.runs.test_consumer_delivery import Redis

    settings.HARBOR_SSE_KEEPALIVE_SECONDS = 60  # only a nudge or an outage's polling reads
    settings.HARBOR_STREAM_POLL_SECONDS = 0.2
    redis = Redis()
    redis.start()
    log: list[int] = []

    async def read(plan, cursor):
        new = [seq for seq in log if seq > cursor]
        return [f"id: {seq}\n\n" for seq in new], max([cursor, *new]), None

    async def scenario():
        url = f"redis://127.0.0.1:{redis.port}/0"
        layer = RedisChannelLayer(hosts=[url])
        tail = Tail(pubsub.Subscriber(url) if transport == "pubsub" else layer, await layer.new_channel("sse."))
        await tail.join("tenant.1")
        stream = sse._frames(_plan(), tail, 0)
        chunks = [await stream.__anext__()]

        async def grow(seq, nudge=True):
            log.append(seq)
            if nudge:
                message = {"type": "harbor.event", "group": "tenant.1", "sequence": seq}
                if transport == "pubsub":
                    await asyncio.to_thread(pubsub.publish, url, [("tenant.1", message)])
                else:
                    await layer.group_send("tenant.1", message)
            chunks.append(await asyncio.wait_for(stream.__anext__(), 3))

        await grow(1)
        await asyncio.to_thread(redis.stop)
        await grow(2, nudge=False)  # Redis is down: read by polling
        await grow(3, nudge=False)
        await asyncio.to_thread(redis.start)
        for _ in range(50):  # the tail re-joins within a poll or two
            if tail.up:
                break
            await asyncio.sleep(0.1)
        assert tail.up  # and no longer polls: only a nudge reads before the keepalive
        await grow(4)  # woken by a live nudge again, long before any keepalive
        await stream.aclose()
        return chunks

    async def head(tenant_id):
        return max(log, default=0)

    originals = sse.read_frames, sse.read_head
    sse.read_frames, sse.read_head = read, head
    try:
        chunks = _in_own_loop(scenario())
    finally:
        sse.read_frames, sse.read_head = originals
        redis.stop()
    assert chunks == ["retry: 3000\n\n", "id: 1\n\n", "id: 2\n\n", "id: 3\n\n", "id: 4\n\n"]


def test_a_push_that_follows_the_cursor_is_delivered_from_the_message_and_a_gap_reads_the_log(settings):
    """Between reads a stream delivers each push that follows its cursor from the message,
    under the Viewer of its last read (no database read); a push after a gap, or one with a
    resume token the caller may use (re-checked at send time), reads the log."""
    from channels.layers import InMemoryChannelLayer

    from runs.domain.tokens import token_seal
    from runs.identity.visibility import Viewer
    from runs.protocol import sse
    from runs.streams.tail import Tail

    settings.HARBOR_SSE_KEEPALIVE_SECONDS = 60
    alice = Viewer(user_id=1, username="alice", session="s1", role="member")
    reads: list[int] = []
    head = [4]

    async def read(plan, cursor):
        reads.append(cursor)
        return [], max(cursor, head[0]), alice

    def item(sequence, owner, session=None):
        envelope = {"type": "pause.requested", "sequence": sequence, "occurred_at": "2026-11-30T00:00:00Z"}
        envelope |= {"tenant": "", "user": "alice", "session": "s1", "run": f"run{owner}", "payload": {"Token": None}}
        pause = {"id": f"p{sequence}", "user": "alice", "session": session, "cause": "hitl_approval"}
        return {
            "envelope": envelope,
            "owner": owner,
            "pause": None if session is None else pause | {"sealed": token_seal("hrbp_t"), "keys": ["Token"]},
        }

    async def scenario():
        layer = InMemoryChannelLayer()
        tail = Tail(layer, await layer.new_channel("sse."))
        await tail.join("tenant.1")
        stream = sse._frames(_plan(), tail, 4)
        assert await stream.__anext__() == "retry: 3000\n\n"
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.05)
        items = [item(5, owner=1), item(6, owner=2), item(7, owner=1, session="s2")]
        push = {"type": "harbor.events", "group": "tenant.1", "first": 5, "sequence": 7, "events": items}
        await layer.group_send("tenant.1", push)
        chunks = [await asyncio.wait_for(first, 3)]
        chunks.append(await asyncio.wait_for(stream.__anext__(), 3))
        read_before_the_gap = list(reads)
        head[0] = 10
        gap = {**push, "first": 10, "sequence": 10, "events": [item(10, owner=1)]}
        waiting = asyncio.ensure_future(stream.__anext__())
        await layer.group_send("tenant.1", gap)
        await asyncio.sleep(0.1)
        mine = {**push, "first": 11, "sequence": 11, "events": [item(11, owner=1, session="s1")]}
        await layer.group_send("tenant.1", mine)
        await asyncio.sleep(0.1)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        return chunks, read_before_the_gap

    originals = sse.read_frames
    sse.read_frames = read
    try:
        chunks, read_before_the_gap = _in_own_loop(scenario())
    finally:
        sse.read_frames = originals
    assert read_before_the_gap == [4]  # the pushed events cost no read
    frames = [json.loads(chunk.split("data: ", 1)[1]) for chunk in chunks]
    assert [f["sequence"] for f in frames] == [5, 7]  # not 6: another member's run
    assert {f["tenant"] for f in frames} == {"acme"}
    assert frames[1]["payload"]["Token"] is None  # another session's pause: not hers to decide
    # The gap reads the log; so does a push with a token she may use (re-checked at send time).
    assert reads == [4, 7, 10]


def test_while_the_layer_is_down_streams_share_one_head_read_and_read_only_on_growth(settings):
    """An outage turns nudges into polling: a process's streams of one tenant share one read
    of the log's head per half poll interval, and read the log only once it has grown."""
    from channels.layers import InMemoryChannelLayer

    from runs.protocol import sse
    from runs.streams.tail import Tail

    settings.HARBOR_SSE_KEEPALIVE_SECONDS = 60  # no keepalive read in this test
    settings.HARBOR_STREAM_POLL_SECONDS = 0.1
    log, reads, heads = [1], [], []

    async def read(plan, cursor):
        reads.append(cursor)
        new = [seq for seq in log if seq > cursor]
        return [f"id: {seq}\n\n" for seq in new], max([cursor, *new]), None

    async def head(tenant_id):
        heads.append(tenant_id)
        return max(log)

    class DownLayer(InMemoryChannelLayer):
        async def group_add(self, group, channel):
            raise ConnectionError("the layer is down")

    async def scenario():
        layer = DownLayer()
        streams = []
        for _ in range(5):
            tail = Tail(layer, await layer.new_channel("sse."))
            await tail.join("tenant.1")
            stream = sse._frames(_plan(), tail, 0)
            assert [await stream.__anext__(), await stream.__anext__()] == ["retry: 3000\n\n", "id: 1\n\n"]
            streams.append(stream)
        reads.clear()
        heads.clear()
        waiting = [asyncio.ensure_future(stream.__anext__()) for stream in streams]
        began = time.monotonic()
        await asyncio.sleep(0.6)  # about six polls of each of the five streams
        quiet = (len(reads), len(heads), time.monotonic() - began)
        log.append(2)
        grown = await asyncio.wait_for(asyncio.gather(*waiting), 5)
        for stream in streams:
            await stream.aclose()
        return quiet, grown

    originals = sse.read_frames, sse.read_head
    sse.read_frames, sse.read_head = read, head
    try:
        (quiet_reads, quiet_heads, elapsed), grown = _in_own_loop(scenario())
    finally:
        sse.read_frames, sse.read_head = originals
    assert quiet_reads == 0  # nothing new: no stream read the log
    assert 0 < quiet_heads <= elapsed / 0.05 + 2  # one shared read per half interval, not one per stream
    assert grown == ["id: 2\n\n"] * 5
    assert len(reads) == 5  # each stream read once, when the head moved


def test_a_tenant_wide_stream_is_read_only_by_a_current_admin(people):
    """Each read re-checks the caller: an admin demoted, or an admin-scoped token whose
    membership was revoked, reads nothing more (the stream then ends)."""
    from django.contrib.auth import get_user_model

    from runs.identity.permissions import membership_grant, membership_revoke
    from runs.models import Role
    from runs.protocol import stream_reads

    User = get_user_model()
    ada = stream_reads._open({"HTTP_AUTHORIZATION": f"Bearer {mint('ada')}"}, {"admin": "1"})
    scoped = stream_reads._open({"HTTP_AUTHORIZATION": f"Bearer {mint('olivia', scopes=['admin'])}"}, {"admin": "1"})
    assert stream_reads._read(ada, 0) is not None and stream_reads._read(scoped, 0) is not None
    membership_grant(tenant=people.acme, user=User.objects.get(username="ada"), role=Role.MEMBER)
    membership_revoke(tenant=people.acme, user=User.objects.get(username="olivia"))
    assert stream_reads._read(ada, 0) is None and stream_reads._read(scoped, 0) is None


def test_one_person_holds_a_bounded_number_of_streams(live_harbor):
    """Past HARBOR_SSE_MAX_PER_USER (50, as websockets) open streams of one person the next
    is refused with 429 rate_limited, another person keeps their own share, and a closed
    stream gives its place back."""

    async def scenario() -> None:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=live_harbor.url, timeout=10, limits=limits) as client:
            held = []
            for _ in range(50):
                request = client.build_request("GET", "/v1/events", headers=_headers("olivia", session="cap"))
                response = await client.send(request, stream=True)
                assert response.status_code == 200
                held.append(response)
            over = await client.get("/v1/events", headers=_headers("olivia", session="other"))
            assert (over.status_code, over.json()["code"]) == (429, "rate_limited")
            assert over.headers["Retry-After"]
            other = await client.send(client.build_request("GET", "/v1/events", headers=_headers("ada")), stream=True)
            assert other.status_code == 200
            await other.aclose()
            await held.pop().aclose()
            deadline = time.monotonic() + 10
            while True:  # the server notices the closed connection
                again = await client.send(
                    client.build_request("GET", "/v1/events", headers=_headers("olivia")), stream=True
                )
                if again.status_code == 200 or time.monotonic() > deadline:
                    break
                await again.aclose()
                await asyncio.sleep(0.2)
            assert again.status_code == 200
            held.append(again)
            for response in held:
                await response.aclose()

    with ThreadPoolExecutor(1) as pool:  # a loop of its own, whatever an earlier test left running here
        pool.submit(asyncio.run, scenario()).result()
