"""Approval gates under acme's demo policy: production deploys need two release managers,
never the requester, and a reason to reject; staging one approver other than the requester.
Approvals bind to the exact arguments they approved."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import Approval, Decision, DecisionRefusal, PauseState
from approvals.policy import arguments_fingerprint
from runs.application import steering_submit
from runs.kernel.errors import AlreadyResumed, PayloadInvalid, ScopeMismatch
from runs.models import Role, RunStatus, ToolCall
from runs.runtime.dispatch import drain
from tests.factories import MembershipFactory, PauseFactory

from .policy_setup import acme_policy_load, production_rule_only


@pytest.fixture
def acme(people):
    acme_policy_load(people)
    return people


@pytest.fixture
def acme_production_only(people):
    acme_policy_load(people, source=production_rule_only())
    return people


def parked(people, environment="production", user="alice"):
    pause = PauseFactory.create(caller=people.caller(user), query=f"deploy build 7 to {environment}", agent_id="deploy")
    assert pause.is_open
    return pause.run, pause


def decide(people, who, run, method="approve", **payload):
    return steering_submit(caller=people.caller(who, "web"), run_id=run.pk, method=method, payload=payload)


def deploys(run) -> list[dict]:
    """The deploy tool's executions, from the ledger, with the arguments it ran with."""
    calls = ToolCall.objects.filter(run=run, tool="deploy_to_production")
    invoked = run.events.filter(type="tool.invoked", payload__Tool="deploy_to_production")
    assert calls.count() == invoked.count()
    return [e.payload["Args"] for e in invoked]


def test_the_gate_keeps_the_rule_its_version_and_the_arguments_fingerprint(acme):
    run, pause = parked(acme)
    assert pause.policy_version == 1
    assert pause.policy_rule["name"] == "production deploys" and pause.policy_rule["quorum"] == 2
    assert pause.args_fingerprint == arguments_fingerprint({"build": "7", "environment": "production"})


def test_the_requester_cannot_approve_her_own_production_deploy(acme):
    run, pause = parked(acme)
    with pytest.raises(ScopeMismatch, match="may not approve it .rule production deploys"):
        steering_submit(caller=acme.caller("alice"), run_id=run.pk, method="approve", payload={})
    refusal = DecisionRefusal.objects.get(pause=pause)
    assert (refusal.actor_user, refusal.code, refusal.method) == ("alice", "scope_mismatch", "approve")
    pause.refresh_from_db()
    assert pause.is_open and not Approval.objects.exists()


def test_a_requester_who_is_a_release_manager_is_refused_in_the_inbox(acme):
    run, pause = parked(acme, user="bob")
    bob = Client()
    bob.login(username="bob", password="bob-password")
    page = bob.post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve"}, follow=True).content.decode()
    assert "may not approve it" in page and "production deploys" in page
    assert DecisionRefusal.objects.get(pause=pause).actor_user == "bob"
    pause.refresh_from_db()
    assert pause.is_open


def test_an_approver_outside_the_group_is_refused(acme):
    MembershipFactory.create(tenant=acme.acme, user__username="dave", role=Role.APPROVER)
    run, pause = parked(acme)
    with pytest.raises(ScopeMismatch, match="only members of release-managers"):
        decide(acme, "dave", run)


def test_one_approval_of_two_leaves_the_gate_open_and_says_so(acme):
    run, pause = parked(acme)
    decide(acme, "bob", run, reason="looks fine")
    drain()
    pause.refresh_from_db()
    run.refresh_from_db()
    assert pause.state == PauseState.PAUSED and run.status == RunStatus.PAUSED
    assert str(pause.approvals_so_far()) == "1 of 2 approvals: bob"
    assert deploys(run) == []
    assert not run.events.filter(type__in=["pause.resumed", "tool.approved"]).exists()
    bob = Client()
    bob.login(username="bob", password="bob-password")
    page = bob.get("/inbox/").content.decode()
    assert "production deploys: 1 of 2 approvals: bob" in page
    assert "Rule production deploys: 1 of 2 approvals: bob" in bob.get(f"/console/runs/{run.pk}/").content.decode()


def test_the_same_person_approving_twice_counts_once(acme):
    run, pause = parked(acme)
    decide(acme, "bob", run)
    with pytest.raises(AlreadyResumed, match="already approved these arguments"):
        decide(acme, "bob", run)
    assert Approval.objects.filter(pause=pause).count() == 1


def test_two_release_managers_clear_the_gate_and_the_deploy_runs_once(acme):
    run, pause = parked(acme)
    decide(acme, "bob", run)
    decide(acme, "carol", run, reason="ship it")
    drain()
    pause.refresh_from_db()
    run.refresh_from_db()
    assert (pause.decision, pause.decided_by.username) == (Decision.APPROVE, "carol")
    assert run.status == RunStatus.COMPLETE
    assert deploys(run) == [{"build": "7", "environment": "production"}]
    assert sorted(Approval.objects.filter(pause=pause).values_list("actor__username", flat=True)) == ["bob", "carol"]


def test_an_edit_starts_the_count_again_and_the_edited_call_runs(acme):
    MembershipFactory.create(tenant=acme.acme, user__username="erin", role=Role.APPROVER)
    acme.acme.approver_groups.get(name="release-managers").members.add(User.objects.get(username="erin"))
    run, pause = parked(acme)
    decide(acme, "bob", run)
    decide(acme, "carol", run, args={"build": "8"})  # a new fingerprint: bob's approval no longer counts
    pause.refresh_from_db()
    assert pause.is_open and str(pause.approvals_so_far()) == "1 of 2 approvals: carol"
    assert pause.payload["Args"] == {"build": "8", "environment": "production"}
    assert pause.payload["ArgsRequested"] == {"build": "7", "environment": "production"}
    decide(acme, "erin", run)  # approves the current (edited) arguments
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert deploys(run) == [{"build": "8", "environment": "production"}]


def test_a_reject_needs_a_reason_and_is_terminal_with_one(acme):
    run, pause = parked(acme)
    with pytest.raises(PayloadInvalid, match="a reason is required to reject under rule production deploys"):
        decide(acme, "bob", run, "reject")
    decide(acme, "bob", run, "reject", reason="not on a Friday")
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and deploys(run) == []


def test_staging_needs_one_approver_other_than_the_requester(acme):
    run, pause = parked(acme, environment="staging")
    assert pause.policy_rule["name"] == "staging deploys"
    with pytest.raises(ScopeMismatch):
        steering_submit(caller=acme.caller("alice"), run_id=run.pk, method="approve", payload={})
    decide(acme, "bob", run)
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert deploys(run) == [{"build": "7", "environment": "staging"}]


def test_a_call_no_rule_covers_keeps_the_tools_gate(acme_production_only):
    acme = acme_production_only
    run, pause = parked(acme, environment="staging")
    assert (pause.policy_rule, pause.policy_version) == ({}, None)
    steering_submit(caller=acme.caller("alice"), run_id=run.pk, method="approve", payload={})
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE


def test_a_tenant_without_a_policy_decides_as_before(people):
    run, pause = parked(people)
    assert pause.policy_rule == {} and pause.policy_version is None
    steering_submit(caller=people.caller("alice"), run_id=run.pk, method="approve", payload={})
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and not Approval.objects.exists()


def test_an_edit_into_production_brings_the_production_rule(acme):
    run, pause = parked(acme, environment="staging")
    decide(acme, "bob", run, args={"environment": "production"})
    pause.refresh_from_db()
    assert pause.is_open and pause.policy_rule["name"] == "production deploys"
    assert str(pause.approvals_so_far()) == "1 of 2 approvals: bob"
    decide(acme, "carol", run)
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert deploys(run) == [{"build": "7", "environment": "production"}]


def test_an_ungoverned_gate_edited_into_production_needs_what_production_needs(acme_production_only):
    acme = acme_production_only
    run, pause = parked(acme, environment="staging")
    with pytest.raises(ScopeMismatch, match="may not approve it .rule production deploys"):
        steering_submit(
            caller=acme.caller("alice"),
            run_id=run.pk,
            method="approve",
            payload={"args": {"environment": "production"}},
        )
    decide(acme, "bob", run, args={"environment": "production"})
    pause.refresh_from_db()
    assert pause.is_open and (pause.policy_rule["name"], pause.policy_version) == ("production deploys", 1)


def test_the_decision_record_names_the_rule_each_approval_its_arguments_and_the_refusal(acme):
    from approvals.domain.records import pause_record

    run, pause = parked(acme)
    with pytest.raises(ScopeMismatch):
        decide(acme, "alice", run)
    decide(acme, "bob", run, args={"environment": "staging"}, reason="staging first")
    decide(acme, "carol", run, reason="agreed")
    pause.refresh_from_db()
    record = pause_record(pause)
    assert record["policy"] == {"version": 1, "rule": "production deploys"}
    assert record["requested_arguments"] == {"build": "7", "environment": "production"}
    assert record["arguments"] == {"build": "7", "environment": "staging"}
    staging = arguments_fingerprint({"build": "7", "environment": "staging"})
    assert [(a["actor"], a["fingerprint"], a["reason"]) for a in record["approvals"]] == [
        ("bob", staging, "staging first"),
        ("carol", staging, "agreed"),
    ]
    assert all(a["at"].endswith("+00:00") for a in record["approvals"])
    assert [(r["actor"], r["code"]) for r in record["refusals"]] == [("alice", "scope_mismatch")]
