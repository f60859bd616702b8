"""Seed the demo provider (idempotently): its people, and the Harbor app as a confidential
client with PKCE, at the redirect URIs given. Prints the provider's demo logins."""

import json
import os
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from oauth2_provider.models import get_application_model

from runs.kernel.owner_files import write_once

PEOPLE = ("alice", "bob", "gina")


class Command(BaseCommand):
    help = "Create the demo provider's people and register the Harbor app as its client."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--client-id", default="harbor-demo")
        parser.add_argument("--client-secret-file", required=True, help="created (0600) with a random secret if absent")
        parser.add_argument("--redirect-uri", action="append", required=True)
        parser.add_argument("--quiet", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        secret_path = settings.VAR_DIR / options["client_secret_file"]
        write_once(secret_path, secrets.token_urlsafe(32).encode())
        client_secret = secret_path.read_text().strip()
        logins_path = settings.VAR_DIR / "oauth-provider-logins.json"
        logins = json.loads(logins_path.read_text()) if logins_path.exists() else {}
        User = get_user_model()
        Application = get_application_model()
        with transaction.atomic():
            for name in PEOPLE:
                password = logins.get(name) or secrets.token_urlsafe(9)
                user = User.objects.filter(username=name).first() or User(username=name)
                if not user.pk or not user.check_password(password):
                    user.set_password(password)
                    user.save()
                logins[name] = password
            app = Application.objects.filter(client_id=options["client_id"]).first() or Application(
                client_id=options["client_id"]
            )
            uris = set((app.redirect_uris or "").split()) | set(options["redirect_uri"])
            app.name = "Harbor"
            app.client_type = Application.CLIENT_CONFIDENTIAL
            app.authorization_grant_type = Application.GRANT_AUTHORIZATION_CODE
            app.redirect_uris = " ".join(sorted(uris))
            app.client_secret = client_secret  # hashed on save
            app.skip_authorization = False
            app.save()
        logins_path.write_text(json.dumps(logins, indent=2))
        os.chmod(logins_path, 0o600)
        if not options["quiet"]:
            people = ", ".join(f"{name} / {logins[name]}" for name in PEOPLE)
            self.stdout.write(f"Demo Calendar (OAuth provider) logins: {people}")
