"""acme's approval policy over the wire (PROTOCOL §4, "Approval policy"): a decision the
rule forbids is 403 scope_mismatch naming the rule, and it is audited; an approval short of
the quorum answers 200 and the pause stays paused."""

from approvals.models import DecisionRefusal, Pause, PauseState
from runs.runtime.dispatch import drain
from tests.approvals.policy_setup import acme_policy_load


def test_the_requester_is_refused_and_two_release_managers_clear_the_gate(api, people):
    acme_policy_load(people)
    run = api.start("deploy build 42 to production", "deploy")
    drain()
    token = api.ok("/v1/pause/list", {"filter": {"run_ids": [run]}})["snapshots"][0]["token"]

    refused = api.error("/v1/control/approve", _body(run, token), status=403, code="scope_mismatch")
    assert "production deploys" in refused["message"]
    refusal = DecisionRefusal.objects.get(pause__run_id=run)
    assert (refusal.actor_user, refusal.code) == ("alice", "scope_mismatch")

    api.error("/v1/control/reject", _body(run, None), status=422, code="payload_invalid", user="bob")
    api.ok("/v1/control/approve", _body(run, None), user="bob")
    assert Pause.objects.get(run_id=run).state == PauseState.PAUSED
    snapshot = api.ok("/v1/pause/list", {"filter": {"run_ids": [run]}}, user="carol")["snapshots"][0]
    assert snapshot["state"] == "paused"
    assert snapshot["approvals"] == {"rule": "production deploys", "required": 2, "approved_by": ["bob"]}
    api.ok("/v1/control/approve", _body(run, None), user="carol")
    assert Pause.objects.get(run_id=run).state == PauseState.RESUMED


def _body(run: str, token: str | None) -> dict:
    return {"identity": {"run": run}, "payload": {"token": token} if token else {}}
