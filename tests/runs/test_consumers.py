"""The websocket stream of the pages (PROTOCOL §5, websockets), through the real ASGI
application: origin check, session auth, permission-filtered delivery and replay."""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from harbor_site.asgi import application
from runs.application import run_start
from runs.identity.permissions import membership_revoke
from runs.models import Event

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")


@database_sync_to_async
def session_cookie(username: str) -> tuple[bytes, bytes]:
    client = Client()
    assert client.login(username=username, password=f"{username}-password")
    return (b"cookie", f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode())


@database_sync_to_async
def start(people, user: str, query: str = "count to 3", agent_id: str = "countdown"):
    run, _ = run_start(caller=people.caller(user), query=query, agent_id=agent_id)
    return run


@database_sync_to_async
def revoke(people, username: str) -> None:
    from django.contrib.auth import get_user_model

    membership_revoke(tenant=people.acme, user=get_user_model().objects.get(username=username))


async def connect(path: str = "/ws/events/", user: str | None = None, origin=ORIGIN):
    headers = [HOST, origin] if origin else [HOST]
    if user:
        headers.append(await session_cookie(user))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=5)
    return communicator, connected, code


async def closed_with(communicator: WebsocketCommunicator, connected: bool) -> int:
    """The code a refused socket is closed with: accepted first, so that a page learns why
    (a handshake refused before its accept reaches a browser as a bare 1006)."""
    assert connected
    output = await communicator.receive_output(timeout=5)
    assert output["type"] == "websocket.close"
    return output["code"]


async def test_anonymous_is_refused(people_tx):
    communicator, connected, _ = await connect()
    assert await closed_with(communicator, connected) == 4401


async def test_a_foreign_origin_is_refused_even_with_a_valid_session(people_tx):
    communicator, connected, _ = await connect(user="bob", origin=(b"origin", b"https://evil.example"))
    assert not connected
    communicator, connected, _ = await connect(user="bob", origin=None)  # no Origin at all
    assert not connected


@pytest.mark.parametrize(
    "origin",
    [
        "http://testserver:9999",
        "https://testserver",
        "ws://testserver",
        "http://evil.testserver",
        "null",
        "http://trusted.example",
    ],
)
async def test_an_origin_must_match_scheme_host_and_port(people_tx, settings, origin):
    settings.CSRF_TRUSTED_ORIGINS = ["https://trusted.example:8443"]
    communicator, connected, _ = await connect(user="bob", origin=(b"origin", origin.encode()))
    assert not connected


@pytest.mark.parametrize("origin", ["http://testserver", "http://TestServer:80", "https://trusted.example:8443"])
async def test_the_servers_own_origin_and_trusted_origins_are_accepted(people_tx, settings, origin):
    settings.CSRF_TRUSTED_ORIGINS = ["https://trusted.example:8443"]
    communicator, connected, _ = await connect(user="bob", origin=(b"origin", origin.encode()))
    assert connected
    await communicator.disconnect()


async def test_the_tenant_stream_delivers_envelopes_live(people_tx):
    communicator, connected, _ = await connect(user="bob")
    assert connected
    run = await start(people_tx, "alice")
    envelope = await communicator.receive_json_from(timeout=5)
    assert envelope["type"] == "task.spawned" and envelope["run"] == run.pk
    assert envelope["tenant"] == "acme" and envelope["user"] == "alice"
    assert set(envelope) == {"type", "sequence", "occurred_at", "tenant", "user", "session", "run", "payload"}
    await communicator.disconnect()


async def test_another_tenant_receives_nothing(people_tx):
    gina, connected, _ = await connect(user="gina")
    assert connected
    await start(people_tx, "alice")
    assert await gina.receive_nothing(timeout=0.5)
    await gina.disconnect()


async def test_a_member_receives_nothing_of_anothers_run(people_tx):
    mallory, connected, _ = await connect(user="mallory")
    assert connected
    await start(people_tx, "alice")
    assert await mallory.receive_nothing(timeout=0.5)
    mine = await start(people_tx, "mallory")
    assert (await mallory.receive_json_from(timeout=5))["run"] == mine.pk
    await mallory.disconnect()


async def test_a_run_stream_refuses_a_run_the_user_may_not_see(people_tx):
    run = await start(people_tx, "alice")
    for user in ("gina", "mallory"):
        communicator, connected, _ = await connect(f"/ws/events/?run={run.pk}", user=user)
        assert await closed_with(communicator, connected) == 4404
    communicator, connected, _ = await connect(f"/ws/events/?run={run.pk}", user="olivia")
    assert connected
    await communicator.disconnect()


async def test_replay_after_a_reconnect_misses_nothing(people_tx):
    run = await start(people_tx, "alice")
    first, connected, _ = await connect(f"/ws/events/?run={run.pk}&after=0", user="olivia")
    seen = [(await first.receive_json_from(timeout=5))["sequence"]]
    await first.disconnect()
    # While disconnected, the run advances.
    from runs.runtime.dispatch import drain

    await database_sync_to_async(drain)()
    logged = await database_sync_to_async(
        lambda: list(Event.objects.filter(run_id=run.pk).order_by("sequence").values_list("sequence", "type"))
    )()
    assert len(logged) > 3 and logged[-1][1] == "task.completed"
    again, connected, _ = await connect(f"/ws/events/?run={run.pk}&after={seen[-1]}", user="olivia")
    assert connected
    replayed = [await again.receive_json_from(timeout=5) for _ in logged[1:]]
    assert [e["sequence"] for e in replayed] == [seq for seq, _ in logged[1:]]
    assert replayed[-1]["type"] == "task.completed" and "Counted to 3" in replayed[-1]["payload"]["Answer"]
    assert await again.receive_nothing(timeout=0.3)  # and nothing twice
    await again.disconnect()


async def test_a_socket_narrowed_to_event_types_receives_only_those_live_and_in_replay(people_tx):
    """?types= narrows a socket as X-Harbor-Event-Type narrows SSE: an inbox listens for
    pauses, not for every step of every run."""
    from runs.runtime.dispatch import drain

    wanted = {"pause.requested", "task.completed"}
    path = f"/ws/events/?types={','.join(sorted(wanted))}"
    bob, connected, _ = await connect(path, user="bob")
    assert connected
    run = await start(people_tx, "alice", query="deploy build 1 to staging", agent_id="deploy")
    await database_sync_to_async(drain)()
    live = await bob.receive_json_from(timeout=5)
    assert live["type"] == "pause.requested" and live["run"] == run.pk and live["payload"]["Token"]
    assert await bob.receive_nothing(timeout=0.3)  # the run's other events were not sent
    logged = await database_sync_to_async(
        lambda: list(Event.objects.filter(run_id=run.pk).order_by("sequence").values_list("sequence", "type"))
    )()
    assert len(logged) > 2
    replay, connected, _ = await connect(f"{path}&after=0", user="bob")
    assert connected
    assert (await replay.receive_json_from(timeout=5))["sequence"] == live["sequence"]
    assert await replay.receive_nothing(timeout=0.3)
    too_many = ",".join(f"type.{n}" for n in range(51))
    for query in (f"types={too_many}", f"types={'x' * 65}"):
        refused, connected, _ = await connect(f"/ws/events/?{query}", user="bob")
        assert await closed_with(refused, connected) == 4400
    for communicator in (bob, replay):
        await communicator.disconnect()


async def test_the_tenant_replay_is_filtered_too(people_tx):
    await start(people_tx, "alice")
    mine = await start(people_tx, "mallory")
    mallory, connected, _ = await connect("/ws/events/?after=0", user="mallory")
    assert connected
    envelopes = [await mallory.receive_json_from(timeout=5)]
    while not await mallory.receive_nothing(timeout=0.3):
        envelopes.append(await mallory.receive_json_from(timeout=5))
    assert {envelope["run"] for envelope in envelopes} == {mine.pk}  # alice's run's events left out
    await mallory.disconnect()


async def test_a_revoked_membership_closes_the_socket(people_tx):
    bob, connected, _ = await connect(user="bob")
    assert connected
    await revoke(people_tx, "bob")
    await start(people_tx, "alice")
    output = await bob.receive_output(timeout=5)
    assert output == {"type": "websocket.close", "code": 4403}


async def test_a_changed_role_closes_the_socket_for_the_page_to_reload(people_tx):
    from django.contrib.auth import get_user_model

    from runs.identity.permissions import membership_grant
    from runs.models import Role

    bob, connected, _ = await connect(user="bob")  # an approver's inbox, with decide buttons
    assert connected
    demote = database_sync_to_async(membership_grant)
    await demote(
        tenant=people_tx.acme,
        user=await database_sync_to_async(get_user_model().objects.get)(username="bob"),
        role=Role.MEMBER,
    )
    output = await bob.receive_output(timeout=5)
    assert output == {"type": "websocket.close", "code": 4409}


async def test_a_quiet_socket_closes_when_its_membership_goes(people_tx, settings):
    settings.HARBOR_WS_RECHECK_SECONDS = 0.1
    bob, connected, _ = await connect(user="bob")
    assert connected
    await revoke(people_tx, "bob")
    output = await bob.receive_output(timeout=5)
    assert output == {"type": "websocket.close", "code": 4403}


@database_sync_to_async
def change_password(username: str) -> None:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username=username)
    user.set_password(f"{username}-new-password")
    user.save()


async def test_a_password_change_closes_an_open_socket(people_tx, settings):
    """A login session keeps the hash of the password it signed in with, so a password change
    ends the person's other sessions (django.contrib.auth.get_user): their open sockets go
    with them at the next re-check, as their pages would."""
    settings.HARBOR_WS_RECHECK_SECONDS = 0.1
    bob, connected, _ = await connect(user="bob")
    assert connected
    await change_password("bob")
    assert await bob.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}


async def test_a_password_change_closes_the_other_sessions_sockets_at_once(people_tx, settings):
    """Not at the next periodic re-check: a socket left open meanwhile would still be sent
    resume tokens of a session the new password signed out."""
    settings.HARBOR_WS_RECHECK_SECONDS = 60
    bob, connected, _ = await connect(user="bob")
    assert connected
    run = await start(people_tx, "alice")
    assert (await bob.receive_json_from(timeout=5))["run"] == run.pk  # checked, and live
    while not await bob.receive_nothing(timeout=2):  # the rest of the run's start, and quiet
        await bob.receive_output()
    await change_password("bob")
    assert await bob.receive_output(timeout=3) == {"type": "websocket.close", "code": 4401}


@database_sync_to_async
def account_leaves(username: str, how: str) -> None:
    """As the admin site does: the account deactivated, deleted, or its membership deleted."""
    from django.contrib.auth import get_user_model

    from runs.models import Membership

    user = get_user_model().objects.get(username=username)
    if how == "deactivated":
        user.is_active = False
        user.save()
    elif how == "deleted":
        user.delete()
    else:
        Membership.objects.filter(user=user).delete()


@pytest.mark.parametrize(("how", "code"), [("deactivated", 4403), ("deleted", 4401), ("membership deleted", 4403)])
async def test_an_account_that_leaves_loses_its_sockets_at_once(people_tx, settings, how, code):
    """Not at the next periodic re-check: meanwhile the socket would be sent new pauses
    with live resume tokens."""
    settings.HARBOR_WS_RECHECK_SECONDS = 60
    bob, connected, _ = await connect(user="bob")
    assert connected
    run = await start(people_tx, "alice")
    assert (await bob.receive_json_from(timeout=5))["run"] == run.pk  # checked, and live
    while not await bob.receive_nothing(timeout=2):
        await bob.receive_output()
    await account_leaves("bob", how)
    assert await bob.receive_output(timeout=3) == {"type": "websocket.close", "code": code}


@database_sync_to_async
def emit_large(run_id: str, size: int) -> None:
    from runs.domain import events
    from runs.models import Run

    with events.atomic():
        run = Run.objects.get(pk=run_id)
        events.emit(
            run=run, type="tool.completed", payload={"Tool": "fetch", "Step": 9, "Result": "é" * size, "Attempt": 1}
        )


@pytest.mark.parametrize("pushed", [True, False])
async def test_an_event_past_the_frame_bound_is_cut_and_the_socket_goes_on(people_tx, settings, pushed):
    """A 2 MiB event reaches the page as a frame within HARBOR_WS_MAX_FRAME_BYTES (a peer
    refuses a message past 1 MiB and then hears nothing more): its small fields whole, the
    large one cut with a note; the next event follows. Delivered from the push, or read
    from the log by a socket that reconnects."""
    run = await start(people_tx, "bob")
    bob, connected, _ = await connect(f"/ws/events/?run={run.pk}", user="bob")
    assert connected
    while not await bob.receive_nothing(timeout=1):
        await bob.receive_output()
    if not pushed:
        await bob.disconnect()
        after = await database_sync_to_async(lambda: Event.objects.filter(run=run).order_by("-sequence")[0].sequence)()
    await emit_large(run.pk, 2 * 1024 * 1024)
    await emit_large(run.pk, 10)
    if not pushed:
        bob, connected, _ = await connect(f"/ws/events/?run={run.pk}&after={after}", user="bob")
        assert connected
    big, small = [await bob.receive_output(timeout=5) for _ in range(2)]
    assert len(big["text"].encode()) <= settings.HARBOR_WS_MAX_FRAME_BYTES < 1024 * 1024
    envelope = json.loads(big["text"])
    assert envelope["truncated"] is True and envelope["type"] == "tool.completed"
    assert (envelope["payload"]["Tool"], envelope["payload"]["Step"]) == ("fetch", 9)
    assert envelope["payload"]["Result"].startswith("éé") and "cut:" in envelope["payload"]["Result"]
    assert json.loads(small["text"])["payload"]["Result"] == "é" * 10
    assert "truncated" not in json.loads(small["text"])
    await bob.disconnect()


async def test_a_cursor_past_the_head_starts_at_the_head(people_tx):
    """A page that saw a longer log (reset since) hears what comes next, rather than nothing
    until the log grows past its cursor."""
    bob, connected, _ = await connect(f"/ws/events/?after={10**17}", user="bob")
    assert connected
    run = await start(people_tx, "alice")
    assert (await bob.receive_json_from(timeout=5))["run"] == run.pk
    await bob.disconnect()


async def test_tokens_go_only_where_the_decision_rule_would_accept_them(people_tx):
    """bob may decide the gate: he is sent its token. olivia may see the run but not
    decide a gate, and alice's page is another session than the run's: neither is."""
    run = await start(people_tx, "alice", query="deploy build 1 to staging", agent_id="deploy")
    bob, _, _ = await connect(f"/ws/events/?run={run.pk}", user="bob")
    olivia, _, _ = await connect(f"/ws/events/?run={run.pk}", user="olivia")
    alice, _, _ = await connect(f"/ws/events/?run={run.pk}", user="alice")
    from runs.runtime.dispatch import drain

    await database_sync_to_async(drain)()

    async def requested(communicator):
        while True:
            envelope = await communicator.receive_json_from(timeout=5)
            if envelope["type"] == "pause.requested":
                return envelope

    assert (await requested(bob))["payload"]["Token"].startswith("hrbp_")
    assert (await requested(olivia))["payload"]["Token"] is None
    assert (await requested(alice))["payload"]["Token"] is None
    for communicator in (bob, olivia, alice):
        await communicator.disconnect()


async def test_clients_cannot_write_or_pick_groups(people_tx):
    """Anything a client sends is ignored, and a malformed run id is refused before any
    group is joined."""
    communicator, connected, _ = await connect("/ws/events/?run=../tenant.1", user="ada")
    assert await closed_with(communicator, connected) == 4400
    communicator, connected, _ = await connect(user="ada")
    await communicator.send_json_to({"type": "harbor.event", "event": 1})
    await communicator.send_to(text_data="{not json")  # not even decoded: nothing to parse
    await communicator.send_to(bytes_data=b"\x00" * 1024)
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


@database_sync_to_async
def switched_session_cookie(username: str, tenant: str) -> tuple[bytes, bytes]:
    """A person in two tenants, signed in, who switched the pages to `tenant`."""
    from django.contrib.auth import get_user_model

    from runs.identity.permissions import membership_grant
    from runs.models import Role, Tenant

    user = get_user_model().objects.get(username=username)
    membership_grant(tenant=Tenant.objects.get(slug=tenant), user=user, role=Role.OPERATOR)
    client = Client()
    assert client.login(username=username, password=f"{username}-password")
    assert client.post("/tenant/", {"tenant": tenant}).status_code == 302
    return (b"cookie", f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode())


# Last-Event-ID's rule: ASCII digits, at most 18. int() alone took signs, spaces, underscores
# and other scripts' digits, and anything else silently meant "no cursor" (no replay).
@pytest.mark.parametrize("after", ["-1", "1" * 19, "9" * 400, "abc", "1e5", "%2B3", "%203", "3_0", "%EF%BC%91", "%00"])
async def test_a_cursor_no_sequence_can_reach_is_refused_before_any_read(people_tx, after):
    communicator, connected, _ = await connect(f"/ws/events/?after={after}", user="ada")
    assert await closed_with(communicator, connected) == 4400


async def test_the_socket_speaks_for_the_tenant_chosen_in_the_pages(people_tx):
    cookie = await switched_session_cookie("olivia", "globex")
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=[HOST, ORIGIN, cookie])
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    await start(people_tx, "alice")  # acme: not the tenant olivia is working in now
    globex = await start(people_tx, "gina")
    envelope = await communicator.receive_json_from(timeout=5)
    assert (envelope["tenant"], envelope["run"]) == ("globex", globex.pk)
    await communicator.disconnect()


async def test_one_person_holds_a_bounded_number_of_sockets(people_tx, settings):
    """Each socket costs reads on the process's one reader thread: the sockets one person
    may hold are bounded, and a closed one frees its place."""
    settings.HARBOR_WS_MAX_PER_USER = 2
    held = [await connect(user="bob") for _ in range(2)]
    assert all(connected for _, connected, _ in held)
    third, connected, _ = await connect(user="bob")
    assert await closed_with(third, connected) == 4429
    alice, connected, _ = await connect(user="alice")  # another person: their own share
    assert connected
    await held[0][0].disconnect()
    again, connected, _ = await connect(user="bob")
    assert connected
    for communicator in (held[1][0], alice, again):
        await communicator.disconnect()
