"""Which rule governs a gated call, under acme's demo policy and a few of their own."""

import pytest

from approvals.models import ApproverGroup
from approvals.policy import (
    ApprovalGate,
    ApprovalRule,
    ApprovalWaived,
    ProtocolDefaults,
    approval_rule_for,
    decision_refusal,
    policy_save,
)

from .conftest import user

DEPLOY = (
    'permit (principal, action == Harbor::Action::"require_approval", resource == Harbor::Tool::"deploy_to_production")'
)
WHEN_PRODUCTION = 'when { context.arguments has environment && context.arguments.environment == "production" }'


@pytest.fixture
def demo(release, demo_source, tool_schemas):
    policy_save(tenant=release.acme, source=demo_source, author=user("ada"), tool_schemas=tool_schemas)
    return release


def ask(people, *, environment="production", tool="deploy_to_production", requester="alice", **extra):
    arguments = {"build": "9", "environment": environment, **extra}
    return approval_rule_for(tenant=people.acme, tool=tool, arguments=arguments, requester=requester, agent="deploy")


def test_production_needs_two_release_managers_never_the_requester(demo):
    outcome = ask(demo)
    assert outcome == ApprovalGate(
        rule=ApprovalRule(name="production deploys", approvers="release-managers", quorum=2, reason_required="reject"),
        version=1,
    )
    assert outcome.rule_name == "production deploys" and not outcome.rule.requester_may_approve
    assert outcome.rule.reason_needed("reject") and not outcome.rule.reason_needed("approve")


def test_staging_needs_one_approver_other_than_the_requester(demo):
    outcome = ask(demo, environment="staging")
    assert outcome == ApprovalGate(rule=ApprovalRule(name="staging deploys"), version=1)
    assert outcome.rule.approvers is None and outcome.rule.quorum == 1 and not outcome.rule.requester_may_approve


@pytest.mark.parametrize(
    "change",
    [
        {"tool": "check_build"},  # another tool
        {"environment": "qa"},  # another environment
        {"environment": "Production"},  # Cedar compares exactly
    ],
)
def test_calls_no_rule_covers_keep_todays_rules(demo, change):
    assert ask(demo, **change) == ProtocolDefaults(version=1)


@pytest.mark.parametrize("requester", ["alice", "bob", "carol", "someone-new"])
def test_the_demo_rules_hold_for_requesters_in_and_out_of_the_group(demo, requester):
    assert ask(demo, requester=requester).rule_name == "production deploys"


def test_arguments_no_rule_can_name_are_left_out_of_the_request(demo):
    outcome = ask(demo, replicas=2.5, tags=["a"], target={"region": "eu"}, huge=1 << 70, dry_run=True)
    assert outcome.rule_name == "production deploys"


def test_no_policy_keeps_the_protocols_defaults(release):
    assert ask(release) == ProtocolDefaults(version=None)


def test_an_explicit_forbid_needs_no_approval_and_outweighs_a_permit(release, tool_schemas):
    source = f"""
        @id("production deploys") @quorum("2") {DEPLOY} {WHEN_PRODUCTION};
        @id("release managers ship alone")
        forbid (principal in Harbor::Group::"release-managers", action, resource == Harbor::Tool::"deploy_to_production");
    """
    policy_save(tenant=release.acme, source=source, author=None, tool_schemas=tool_schemas)
    assert ask(release, requester="bob") == ApprovalWaived(rule_name="release managers ship alone", version=1)
    assert ask(release, requester="alice").rule_name == "production deploys"  # not in the group


def test_the_strictest_matching_rule_wins_whatever_the_order(release, tool_schemas):
    rules = [
        f'@id("a: one") {DEPLOY};',
        f'@id("b: two, late") @quorum("2") @deadline_minutes("120") {DEPLOY};',
        f'@id("c: two, soon") @quorum("2") @deadline_minutes("30") {DEPLOY};',
        f'@id("d: two, soon too") @quorum("2") @deadline_minutes("30") {DEPLOY};',
        f'@id("e: three, elsewhere") @quorum("3") {DEPLOY} when {{ context.agent == "other" }};',
    ]
    for version, order in enumerate([rules, rules[::-1]], start=1):
        policy_save(tenant=release.acme, source="\n".join(order), author=None, tool_schemas=tool_schemas)
        outcome = ask(release)
        # highest quorum, then earliest deadline, then the name: c over b and d; e does not match
        assert isinstance(outcome, ApprovalGate) and outcome.version == version
        assert outcome.rule_name == "c: two, soon" and outcome.rule.deadline_minutes == 30


def test_a_rule_can_name_the_requesters_group(release, tool_schemas):
    source = f"""
        @id("newcomers need two") @quorum("2") {DEPLOY} unless {{ principal in Harbor::Group::"release-managers" }};
        @id("release managers need one") {DEPLOY} when {{ principal in Harbor::Group::"release-managers" }};
    """
    policy_save(tenant=release.acme, source=source, author=None, tool_schemas=tool_schemas)
    assert ask(release, requester="alice").rule_name == "newcomers need two"
    assert ask(release, requester="carol").rule_name == "release managers need one"


def test_a_new_version_is_in_force_at_once(demo, tool_schemas):
    assert ask(demo).rule_name == "production deploys"
    policy_save(tenant=demo.acme, source=f'@id("all deploys") {DEPLOY};', author=None, tool_schemas=tool_schemas)
    assert ask(demo) == ApprovalGate(rule=ApprovalRule(name="all deploys"), version=2)


def test_another_tenants_policy_does_not_apply(demo):
    outcome = approval_rule_for(
        tenant=demo.globex,
        tool="deploy_to_production",
        arguments={"environment": "production"},
        requester="gina",
        agent="deploy",
    )
    assert outcome == ProtocolDefaults(version=None)


# --- who may decide --------------------------------------------------------------------------


def test_the_requester_may_not_decide_unless_the_rule_says_so(demo):
    rule = ask(demo, environment="staging").rule
    assert decision_refusal(rule, tenant=demo.acme, person=user("alice"), requester="alice") == (
        "the person who asked for this call may not approve it"
    )
    assert decision_refusal(rule, tenant=demo.acme, person=user("bob"), requester="alice") is None
    lenient = ApprovalRule(name="self-service", requester_may_approve=True)
    assert decision_refusal(lenient, tenant=demo.acme, person=user("alice"), requester="alice") is None


def test_only_the_rules_approvers_may_decide(demo):
    rule = ask(demo).rule
    assert decision_refusal(rule, tenant=demo.acme, person=user("olivia"), requester="alice") == (
        "only members of release-managers may decide"
    )
    for member in ("bob", "carol"):
        assert decision_refusal(rule, tenant=demo.acme, person=user(member), requester="alice") is None
    # A release manager who asked is still the requester.
    refusal = decision_refusal(rule, tenant=demo.acme, person=user("bob"), requester="bob")
    assert refusal == "the person who asked for this call may not approve it"


def test_a_group_of_the_same_name_in_another_tenant_does_not_count(demo):
    ApproverGroup.objects.create(tenant=demo.globex, name="release-managers").members.add(user("olivia"))
    rule = ask(demo).rule
    assert decision_refusal(rule, tenant=demo.acme, person=user("olivia"), requester="alice") is not None
