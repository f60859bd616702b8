"""A program answers the travel desk over /v1: the pause snapshot names the remote task and
its question; an empty or too-large answer is 422 payload_invalid and changes nothing."""

import pytest

from approvals.a2a.models import RemoteAgent
from runs.models import Run, RunStatus
from runs.runtime.dispatch import drain
from tests.conftest import db_snapshot
from tests.travel_desk import travel_desk  # noqa: F401  (the live desk fixture)


@pytest.mark.parametrize("bad", ["", "  ", "x" * 2001, 42, None], ids=["empty", "blank", "too-long", "number", "none"])
def test_an_answer_over_the_protocol(api, people, travel_desk, bad):  # noqa: F811
    RemoteAgent.objects.create(tenant=people.acme, name="travel-desk", card_url=travel_desk.url)
    run = api.start("Book a flight to Lisbon", agent_id="trip")
    drain()
    [snapshot] = api.ok("/v1/pause/list", {"identity": {}, "filter": {"causes": ["a2a"]}})["snapshots"]
    assert (snapshot["cause"], snapshot["reason"], snapshot["run"]) == ("a2a", "await_input", run)
    assert snapshot["payload"]["Question"] == "Which date do you want to fly?" and snapshot["payload"]["RemoteTaskID"]

    before = db_snapshot()
    api.error(
        "/v1/control/resume", {"identity": {"run": run}, "payload": {"input": bad}}, status=422, code="payload_invalid"
    )
    assert db_snapshot() == before

    api.ok(
        "/v1/control/resume", {"identity": {"run": run}, "payload": {"token": snapshot["token"], "input": "March 3"}}
    )
    drain()
    done = Run.objects.get(pk=run)
    assert done.status == RunStatus.COMPLETE and "on March 3" in done.answer
