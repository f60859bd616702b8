"""A policy that is not valid changes nothing, and says why in the validator's words: through
the service, the command and the admin alike."""

import pytest
from django.core.management import CommandError, call_command

from approvals.models import ApprovalPolicy
from approvals.policy import PolicyInvalid, policy_save
from tests.factories import SuperuserFactory

from .conftest import user

PERMIT = (
    'permit (principal, action == Harbor::Action::"require_approval", resource == Harbor::Tool::"deploy_to_production")'
)

INVALID = [
    pytest.param("permit (principal, action, resource", "not valid Cedar", id="bad-cedar"),
    pytest.param(
        f'@id("canary") {PERMIT} when {{ context.arguments.region == "eu" }};',
        'rule "canary": for policy `policy0`, attribute `arguments.region` in context',
        id="unknown-argument",
    ),
    pytest.param(
        f'@id("canary") {PERMIT} when {{ context.arguments has region && context.arguments.region == "eu" }};',
        'rule "canary": no tool has an argument "region"',
        id="unknown-argument-behind-has",
    ),
    pytest.param(
        f'@id("who") {PERMIT} when {{ context has session && context.agent == "deploy" }};',
        'rule "who": the context has no "session"',
        id="unknown-context-behind-has",
    ),
    pytest.param(
        f'@id("numbers") {PERMIT} when {{ context.arguments has build && context.arguments.build > 3 }};',
        'rule "numbers":',
        id="argument-of-another-type",
    ),
    pytest.param(
        f"{PERMIT};", 'policy 1 in the file: a permit needs @id("…") to name its rule', id="permit-without-id"
    ),
    pytest.param(
        f'@id("big") @quorum("11") {PERMIT};',
        'rule "big": @quorum must be a whole number from 1 to 10, not "11"',
        id="bad-quorum",
    ),
    pytest.param(
        f'@id("zero") @quorum("0") {PERMIT};', 'rule "zero": @quorum must be a whole number', id="zero-quorum"
    ),
    pytest.param(
        f'@id("mystery") @approvers("night-shift") {PERMIT};',
        'rule "mystery": no approver group "night-shift" in this tenant',
        id="unknown-group",
    ),
    pytest.param(
        f'@id("late") @escalate_to("oncall") @escalate_minutes("5") {PERMIT};',
        'rule "late": no approver group "oncall" in this tenant',
        id="unknown-escalation-group",
    ),
    pytest.param(
        f'@id("colour") @colour("red") {PERMIT};', 'rule "colour": unknown annotation @colour', id="unknown-key"
    ),
    pytest.param(
        f'@id("why") @reason_required("sometimes") {PERMIT};',
        'rule "why": @reason_required must be one of reject, approve, both, none, not "sometimes"',
        id="bad-reason",
    ),
    pytest.param(
        f'@id("half") @escalate_to("release-managers") {PERMIT};',
        'rule "half": @escalate_to and @escalate_minutes go together',
        id="escalation-without-minutes",
    ),
    pytest.param(
        f'@id("twice") {PERMIT};\n@id("twice") {PERMIT};',
        'rule "twice": two permits have this @id',
        id="duplicate-names",
    ),
    pytest.param(
        '@id("free") @quorum("2") forbid (principal, action, resource);',
        "policy 1 in the file: a forbid takes only @id",
        id="forbid-with-rule-annotations",
    ),
    pytest.param(
        '@id("slot") permit (principal == ?principal, action, resource);', "templates", id="template-not-a-rule"
    ),
]


@pytest.fixture
def saved(release, demo_source, tool_schemas):
    """acme's demo policy as version 1."""
    return policy_save(tenant=release.acme, source=demo_source, author=user("ada"), tool_schemas=tool_schemas)


def _unchanged(saved) -> None:
    assert list(ApprovalPolicy.objects.values_list("pk", "version", "source")) == [(saved.pk, 1, saved.source)], (
        "nothing saved"
    )


@pytest.mark.parametrize("source, message", INVALID)
def test_the_service_refuses_and_saves_nothing(saved, release, tool_schemas, source, message):
    with pytest.raises(PolicyInvalid) as refused:
        policy_save(tenant=release.acme, source=source, author=user("ada"), tool_schemas=tool_schemas)
    assert any(message in line for line in refused.value.messages), refused.value.messages
    _unchanged(saved)


@pytest.mark.parametrize("source, message", INVALID)
def test_the_command_refuses_and_saves_nothing(saved, tmp_path, source, message):
    file = tmp_path / "policy.cedar"
    file.write_text(source)
    with pytest.raises(CommandError) as refused:
        call_command("harbor_policy", "load", str(file), "--tenant", "acme", "--author", "ada")
    assert "the policy is not valid" in str(refused.value) and message in str(refused.value)
    if "approver group" not in message:  # `check` without a tenant knows no groups
        with pytest.raises(CommandError) as checked:
            call_command("harbor_policy", "check", str(file))
        assert message in str(checked.value)
    _unchanged(saved)


@pytest.mark.parametrize("source, message", INVALID)
def test_the_admin_form_shows_the_message_and_saves_nothing(saved, release, client, source, message):
    client.force_login(SuperuserFactory.create(username="root"))
    response = client.post(
        "/admin/approvals/approvalpolicy/add/", {"tenant": release.acme.pk, "source": source, "note": "try"}
    )
    assert response.status_code == 200  # the form again, with its errors
    errors = response.context["adminform"].form.errors["source"]
    assert any(message in error for error in errors), errors
    _unchanged(saved)


def test_every_problem_is_reported_at_once(release, tool_schemas):
    source = f'@id("x") @quorum("11") @colour("red") {PERMIT} when {{ context.arguments.nope == "1" }};\n{PERMIT};'
    with pytest.raises(PolicyInvalid) as refused:
        policy_save(tenant=release.acme, source=source, author=None, tool_schemas=tool_schemas)
    assert len(refused.value.messages) == 4, refused.value.messages
    assert not ApprovalPolicy.objects.exists()
