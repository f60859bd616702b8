"""Create the embedded demo's tenants and people, acme's approver group and approval policy
(docs/policies/acme.cedar), and print the logins.

Passwords are generated on first run and kept in var/demo-logins.json (readable by the
owner only), so the same logins print every time."""

import json
import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from approvals.models import ApproverGroup
from approvals.policy import policy_active, policy_save
from approvals.policy.tool_arguments import tool_argument_schemas
from runs.application.catalog import tools_offered
from runs.identity.permissions import membership_grant
from runs.models import Role, Tenant

DEMO = [
    ("acme", "Acme Corp", "alice", Role.MEMBER, False),
    ("acme", "Acme Corp", "bob", Role.APPROVER, False),
    ("acme", "Acme Corp", "carol", Role.APPROVER, False),
    ("acme", "Acme Corp", "olivia", Role.OPERATOR, False),
    ("acme", "Acme Corp", "admin", Role.ADMIN, True),
    ("globex", "Globex", "gina", Role.MEMBER, False),
    ("globex", "Globex", "olivia", Role.OPERATOR, False),  # one person in two tenants
]


# acme's approval group, and the policy that names it.
RELEASE_MANAGERS = ["bob", "carol"]
ACME_POLICY = settings.BASE_DIR / "docs" / "policies" / "acme.cedar"


def _policy_seed(slug: str, group_name: str, members: list[str], policy_file: Path) -> int:
    """The group with its members, and the policy file as a new version only when it differs
    from the one in force: a second run changes nothing."""
    tenant = Tenant.objects.get(slug=slug)
    group, _ = ApproverGroup.objects.get_or_create(tenant=tenant, name=group_name)
    group.members.add(*get_user_model().objects.filter(username__in=members))
    source = policy_file.read_text(encoding="utf-8")
    active = policy_active(tenant)
    if active is None or active.source != source:
        active = policy_save(
            tenant=tenant,
            source=source,
            author=None,
            note=f"the demo's {policy_file.name}",
            tool_schemas=tool_argument_schemas(tools_offered()),
        )
    return active.version


class Command(BaseCommand):
    help = "Create the demo tenants (acme, globex), users and acme's approval policy, and print the logins."

    def handle(self, *args: str, **options: object) -> None:
        path = settings.VAR_DIR / "demo-logins.json"
        passwords = json.loads(path.read_text()) if path.exists() else {}
        User = get_user_model()
        with transaction.atomic():
            for slug, name, username, role, superuser in DEMO:
                tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
                user = User.objects.filter(username=username).first()
                password = passwords.get(username) or secrets.token_urlsafe(9)
                if user is None:
                    user = User.objects.create_user(username=username, password=password)
                elif username not in passwords or not user.check_password(password):
                    user.set_password(password)
                user.is_staff = user.is_superuser = superuser
                user.save()
                passwords[username] = password
                membership_grant(tenant=tenant, user=user, role=role)
            version = _policy_seed("acme", "release-managers", RELEASE_MANAGERS, ACME_POLICY)
        path.write_text(json.dumps(passwords, indent=2))
        os.chmod(path, 0o600)
        self.stdout.write(f"Demo logins (http://127.0.0.1:{os.environ.get('PORT', '8000')}/):")
        roles: dict[str, list[str]] = {}
        for slug, _, username, role, _ in DEMO:
            roles.setdefault(username, []).append(f"{role} in {slug}")
        for username, held in roles.items():
            self.stdout.write(f"  {username:<7} {passwords[username]:<14} {', '.join(held)}")
        self.stdout.write(
            f"acme's approval policy: version {version} of docs/policies/{ACME_POLICY.name}"
            f" (release-managers: {', '.join(RELEASE_MANAGERS)}; `manage.py harbor_policy show --tenant acme`)"
        )
