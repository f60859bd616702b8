"""acme under its demo policy (docs/policies/acme.cedar): carol joins bob as an approver, the
two are release-managers, and the policy is in force."""

from pathlib import Path

from django.contrib.auth.models import User

from approvals.models import ApproverGroup
from approvals.policy import policy_save
from approvals.policy.tool_arguments import tool_argument_schemas
from runs.application.catalog import tools_offered
from runs.models import Role
from tests.factories import MembershipFactory

DEMO_POLICY = Path(__file__).resolve().parents[2] / "docs" / "policies" / "acme.cedar"


def acme_policy_load(people, source: str | None = None) -> None:
    MembershipFactory.create(tenant=people.acme, user__username="carol", role=Role.APPROVER)
    group = ApproverGroup.objects.create(tenant=people.acme, name="release-managers")
    group.members.add(*User.objects.filter(username__in=["bob", "carol"]))
    policy_save(
        tenant=people.acme,
        source=source or DEMO_POLICY.read_text(encoding="utf-8"),
        author=User.objects.get(username="ada"),
        tool_schemas=tool_argument_schemas(tools_offered()),
    )


def production_rule_only() -> str:
    """The demo policy without its staging rule: a staging deploy is then a call no rule covers."""
    text = DEMO_POLICY.read_text(encoding="utf-8")
    return text[: text.index('@id("staging deploys")')]
