"""acme's release managers (bob and carol, approvers) and the demo policy's source."""

from pathlib import Path

import pytest
from django.contrib.auth.models import User

from approvals.models import ApproverGroup
from approvals.policy.tool_arguments import tool_argument_schemas
from runs.application.catalog import tools_offered
from runs.models import Role
from tests.factories import MembershipFactory

DEMO_POLICY = Path(__file__).resolve().parents[3] / "docs" / "policies" / "acme.cedar"


@pytest.fixture
def tool_schemas() -> dict:
    """The deployment's tools, as the command and the admin gather them."""
    return tool_argument_schemas(tools_offered())


@pytest.fixture
def release(people):
    """people, plus carol (approver) and the group release-managers: bob and carol."""
    MembershipFactory.create(tenant=people.acme, user__username="carol", role=Role.APPROVER)
    group = ApproverGroup.objects.create(tenant=people.acme, name="release-managers")
    group.members.add(*User.objects.filter(username__in=["bob", "carol"]))
    return people


@pytest.fixture
def demo_source() -> str:
    return DEMO_POLICY.read_text(encoding="utf-8")


def user(username: str) -> User:
    return User.objects.get(username=username)
