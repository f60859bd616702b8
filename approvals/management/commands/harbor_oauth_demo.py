"""Configure the demo tenants' `calendar` OAuth source to use the demo provider
(approvals.oauth.provider), idempotently. The client secret is read from the file the
provider's setup wrote, and stored sealed."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from approvals.oauth.sources import Source, source_save
from runs.models import Tenant


class Command(BaseCommand):
    help = "Point the demo tenants' `calendar` source at the demo OAuth provider."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--provider-url", required=True, help="e.g. http://127.0.0.1:8001")
        parser.add_argument("--client-secret-file", required=True)
        parser.add_argument("--client-id", default="harbor-demo")
        parser.add_argument("--tenant", action="append", help="default: every tenant")

    def handle(self, *args: Any, **options: Any) -> None:
        base = options["provider_url"].rstrip("/")
        with open(options["client_secret_file"]) as secret_file:
            secret = secret_file.read().strip()
        source = Source(
            name="calendar",
            display_name="Demo Calendar",
            client_id=options["client_id"],
            client_secret=secret,
            authorize_url=f"{base}/o/authorize/",
            token_url=f"{base}/o/token/",
            revoke_url=f"{base}/o/revoke_token/",
            api_base_url=base,
            scopes=("calendar.read",),
        )
        tenants = Tenant.objects.all()
        if options["tenant"]:
            tenants = tenants.filter(slug__in=options["tenant"])
        for tenant in tenants:
            source_save(tenant, source)
