"""Configure a tenant's remote A2A agent (what the admin page does), for scripts and bin/run."""

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from approvals.a2a.models import RemoteAgent
from runs.models import Tenant


class Command(BaseCommand):
    help = "Create or update a tenant's remote A2A agent: name, card URL and (optionally) its Authorization header."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name", required=True)
        parser.add_argument("--card-url", required=True)
        parser.add_argument("--auth-header", default=None, help='e.g. "Bearer …"; omitted: left as it is')

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        agent, created = RemoteAgent.objects.get_or_create(
            tenant=tenant, name=options["name"], defaults={"card_url": options["card_url"]}
        )
        agent.card_url = options["card_url"]
        if options["auth_header"] is not None:
            agent.set_auth_header(options["auth_header"])
        agent.full_clean(validate_unique=False)
        agent.save()
        self.stdout.write(
            f"{'Created' if created else 'Updated'} remote agent {agent.name} for {tenant.slug}: {agent.card_url}"
        )
