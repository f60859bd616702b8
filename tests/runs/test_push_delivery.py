"""A pushed event reaches each socket decided on the push alone (runs.identity.visibility
.Viewer): no read of the database per delivery, the same rule as the log, and a resume
token only for those who may decide."""

import pytest
from channels.db import database_sync_to_async

from approvals.domain.tokens import token_unseal
from approvals.models import Pause
from runs.runtime.dispatch import drain
from runs.web import consumers

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
    original = consumers._read_many

    def counted(batch):
        reads.extend(batch)
        return original(batch)

    monkeypatch.setattr(consumers, "_read_many", counted)

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
