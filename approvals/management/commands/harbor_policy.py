"""Approval policies from the command line: check a file, load it as a tenant's next version,
show the version in force. Each rule is printed in plain words."""

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from approvals.models import ApproverGroup
from approvals.policy import PolicyInvalid, policy_active, policy_check, policy_save
from approvals.policy.tool_arguments import tool_argument_schemas
from approvals.policy.validate import CheckedPolicy, policy_read
from runs.application.catalog import tools_offered
from runs.models import Tenant


class Command(BaseCommand):
    help = "Check, load or show an approval policy (Cedar). See README, 'Approval policies'."

    def add_arguments(self, parser: ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        check = actions.add_parser("check", help="validate a policy file and print its rules")
        check.add_argument("file")
        check.add_argument("--tenant", help="also check that the groups it names exist in this tenant")
        load = actions.add_parser("load", help="save a policy file as the tenant's next version")
        load.add_argument("file")
        load.add_argument("--tenant", required=True)
        load.add_argument("--author", help="username recorded as the version's author")
        load.add_argument("--note", default="")
        show = actions.add_parser("show", help="print the tenant's policy in force")
        show.add_argument("--tenant", required=True)

    def handle(self, *args: str, **options: Any) -> None:
        action = options["action"]
        tenant = _tenant(options["tenant"]) if options.get("tenant") else None
        if action == "show":
            assert tenant is not None
            self._show(tenant)
            return
        source = _read(options["file"])
        schemas = tool_argument_schemas(tools_offered())
        try:
            if action == "check":
                groups = _groups(tenant) if tenant else None
                self._rules(policy_check(source, tool_schemas=schemas, group_names=groups))
                return
            assert tenant is not None
            author = _author(options["author"]) if options["author"] else None
            saved = policy_save(tenant=tenant, source=source, author=author, note=options["note"], tool_schemas=schemas)
        except PolicyInvalid as invalid:
            raise CommandError("the policy is not valid:\n  " + "\n  ".join(invalid.messages)) from None
        self.stdout.write(f"{tenant.slug}: version {saved.version} is in force")
        self._rules(policy_read(saved.source))

    def _show(self, tenant: Tenant) -> None:
        active = policy_active(tenant)
        if active is None:
            self.stdout.write(f"{tenant.slug}: no policy; the protocol's defaults apply")
            return
        by = f" by {active.author.get_username()}" if active.author else ""
        self.stdout.write(f"{tenant.slug}: version {active.version}, saved {active.created_at:%Y-%m-%d %H:%M}{by}")
        if active.note:
            self.stdout.write(f"  note: {active.note}")
        self._rules(policy_read(active.source))

    def _rules(self, checked: CheckedPolicy) -> None:
        if not checked.entries:
            self.stdout.write("  no rules: the protocol's defaults apply")
        for entry in checked.entries:
            self.stdout.write(f"  {entry.words()}")


def _read(file: str) -> str:
    try:
        return Path(file).read_text(encoding="utf-8")
    except OSError as error:
        raise CommandError(f"cannot read {file}: {error.strerror}") from None


def _tenant(slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise CommandError(f"no tenant {slug}")
    return tenant


def _groups(tenant: Tenant) -> set[str]:
    return set(ApproverGroup.objects.filter(tenant=tenant).values_list("name", flat=True))


def _author(username: str) -> User:
    author = User.objects.filter(username=username).first()
    if author is None:
        raise CommandError(f"no user {username}")
    return author
