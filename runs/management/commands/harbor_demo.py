"""Create the embedded demo's tenants and people, and print their logins.

Passwords are generated on first run and kept in var/demo-logins.json (readable by the
owner only), so the same logins print every time."""

import json
import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from runs.identity.permissions import membership_grant
from runs.models import Role, Tenant

DEMO = [
    ("acme", "Acme Corp", "alice", Role.MEMBER, False),
    ("acme", "Acme Corp", "bob", Role.APPROVER, False),
    ("acme", "Acme Corp", "olivia", Role.OPERATOR, False),
    ("acme", "Acme Corp", "admin", Role.ADMIN, True),
    ("globex", "Globex", "gina", Role.MEMBER, False),
    ("globex", "Globex", "olivia", Role.OPERATOR, False),  # one person in two tenants
]


class Command(BaseCommand):
    help = "Create the demo tenants (acme, globex) and users, and print their logins."

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
        path.write_text(json.dumps(passwords, indent=2))
        os.chmod(path, 0o600)
        self.stdout.write(f"Demo logins (http://127.0.0.1:{os.environ.get('PORT', '8000')}/):")
        roles: dict[str, list[str]] = {}
        for slug, _, username, role, _ in DEMO:
            roles.setdefault(username, []).append(f"{role} in {slug}")
        for username, held in roles.items():
            self.stdout.write(f"  {username:<7} {passwords[username]:<14} {', '.join(held)}")
