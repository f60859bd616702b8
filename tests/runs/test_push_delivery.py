"""A pushed event reaches each socket decided on the push alone (runs.identity.visibility
.Viewer): no read of the database per delivery, the same rule as the log, and a resume
token only for those who may decide."""

import pytest
from channels.db import database_sync_to_async

from approvals.models import Pause
from runs.domain import push as live_push
from runs.domain import selectors
from runs.domain.tokens import token_unseal
from runs.identity.visibility import viewer_of
from runs.runtime.dispatch import drain
from runs.streams import reads as streams
from runs.web.sockets import reads as socket_reads

from .test_consumers import connect, start

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@database_sync_to_async
def park(people) -> tuple[str, str | None]:
    run = start.func(people, "alice", "launch", "probe")
    drain()
    pause = Pause.objects.get(run=run)
    return run.pk, token_unseal(pause.token_sealed)


async def frames_until_quiet(communicator, timeout: float = 1.0) -> list[dict]:
    frames = []
    while not await communicator.receive_nothing(timeout=timeout):
        frames.append(await communicator.receive_json_from())
    return frames


async def test_a_pause_reaches_each_socket_from_the_push_with_the_token_only_for_deciders(
    people_tx, probe, monkeypatch
):
    sockets = {}
    for user in ("bob", "olivia", "mallory"):
        sockets[user], connected, _ = await connect(user=user)
        assert connected
    for communicator in sockets.values():
        assert await frames_until_quiet(communicator, 0.5) == []  # the first read of the log is done
    reads = []
    original = socket_reads.read_many

    def counted(batch):
        reads.extend(batch)
        return original(batch)

    monkeypatch.setattr(socket_reads, "read_many", counted)

    run_id, token = await park(people_tx)

    bob = await frames_until_quiet(sockets["bob"])
    olivia = await frames_until_quiet(sockets["olivia"])
    assert reads == []  # delivered from the push: no database read for any socket
    assert "pause.requested" in [f["type"] for f in bob]
    assert [f["sequence"] for f in bob] == [f["sequence"] for f in olivia]
    assert {f["run"] for f in bob} == {run_id} and {f["tenant"] for f in bob} == {"acme"}
    requested = {f["type"]: f["payload"] for f in bob}["pause.requested"]
    assert requested["Token"] == token  # an approver decides a gate
    assert {f["type"]: f["payload"] for f in olivia}["pause.requested"]["Token"] is None  # an operator does not
    assert await frames_until_quiet(sockets["mallory"], 0.3) == []  # another member's run: nothing
    for communicator in sockets.values():
        await communicator.disconnect()


@database_sync_to_async
def pushed_and_read(people, monkeypatch) -> tuple[list, list]:
    """What each caller is shown of a parked run from its pushes (streams.push_shown and
    pushed_envelope, as the websockets and SSE deliver them) and from the log (read_after)."""
    pushed: list[dict] = []
    monkeypatch.setattr(
        live_push, "push", lambda tenant_id, written: pushed.extend(live_push._published(e, p) for e, p in written)
    )
    before = selectors.events_head(tenant_id=people.acme.pk)
    run = start.func(people, "alice", "launch", "probe")
    drain()
    start.func(people, "mallory")
    callers = [people.caller(user) for user in ("alice", "bob", "olivia", "ada", "mallory")]
    callers.append(people.caller("alice", session="s2"))
    from_pushes, from_log = [], []
    for caller in callers:
        viewer = viewer_of(caller)
        for run_id in (None, run.pk):
            shown = [(item, streams.push_shown(item, viewer=viewer, run_id=run_id)) for item in pushed]
            from_pushes.append(
                [
                    streams.pushed_envelope(item, tenant_slug="acme", with_token=bool(with_token))
                    for item, with_token in shown
                    if with_token is not None
                ]
            )
            from_log.append(streams.read_after(caller=caller, cursor=before, run_id=run_id)[0])
    return from_pushes, from_log


async def test_a_pushed_event_is_shown_as_the_log_shows_it_to_each_caller(people_tx, probe, monkeypatch):
    from_pushes, from_log = await pushed_and_read(people_tx, monkeypatch)
    assert from_pushes == from_log
    assert len({len(envelopes) for envelopes in from_log}) > 2  # the rule kept some events from some
    tokens = {e["payload"].get("Token") for envelopes in from_log for e in envelopes if e["type"] == "pause.requested"}
    assert None in tokens and len(tokens) == 2  # shown to some callers, not to others
