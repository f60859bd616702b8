"""Mint a bearer JWT for the /v1 API.

Signed by the development key pair, which only the embedded default trusts; production
trusts only its configured public keys, so there a token needs `--private-key` (the
private half of one of them)."""

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from runs.identity.bearer_tokens import token_issue


class Command(BaseCommand):
    help = "Print a Harbor API token (JWT) for a tenant, user and session."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--user", required=True)
        parser.add_argument("--session", help="the session claim (X-Harbor-Session overrides it)")
        parser.add_argument(
            "--scope", action="append", default=[], dest="scopes", help="a scope claim, e.g. --scope admin (repeatable)"
        )
        parser.add_argument("--ttl", type=int, default=12 * 3600, help="lifetime in seconds (default 12 hours)")
        parser.add_argument("--private-key", help="sign with this PEM private key instead of the development key")
        parser.add_argument(
            "--issuer", help="the iss claim (default: harbor-dev, or HARBOR_JWT_ISSUER with --private-key)"
        )
        parser.add_argument("--audience", help="the aud claim (default: HARBOR_JWT_AUDIENCE)")

    def handle(self, *args: str, **options: Any) -> None:
        key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | None = None
        if options["private_key"]:
            try:
                loaded = serialization.load_pem_private_key(Path(options["private_key"]).read_bytes(), password=None)
            except (OSError, ValueError, TypeError) as error:
                raise CommandError(f"cannot read the private key: {error}") from None
            if not isinstance(loaded, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
                raise CommandError("the private key must be RSA or EC (tokens are RS* or ES* signed)")
            key = loaded
        elif not settings.HARBOR_JWT_DEV_KEYS:
            raise CommandError(
                "this deployment does not trust the development key pair (only the embedded default does); "
                "pass --private-key with the private half of a key this deployment trusts (and --issuer)"
            )
        if not 0 < options["ttl"] <= settings.HARBOR_JWT_MAX_TTL_SECONDS:
            raise CommandError(f"--ttl must be between 1 and {settings.HARBOR_JWT_MAX_TTL_SECONDS} seconds")
        token = token_issue(
            tenant=options["tenant"],
            user=options["user"],
            session=options["session"],
            scopes=options["scopes"],
            ttl=options["ttl"],
            private_key=key,
            issuer=options["issuer"],
            audience=options["audience"],
        )
        self.stdout.write(token)
