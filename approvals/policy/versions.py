"""A tenant's policy versions: the latest is in force; saving writes the next one.

A version is never edited. Saving checks the source first (Cedar, the tools' arguments, the
annotations, the tenant's groups) and writes nothing when it fails."""

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from approvals.models import ApprovalPolicy, ApproverGroup
from approvals.policy.validate import policy_check
from runs.models import Tenant

# Two saves at once: the loser of the unique (tenant, version) tries again on the newer latest.
_SAVE_ATTEMPTS = 3


def policy_active(tenant: Tenant) -> ApprovalPolicy | None:
    return ApprovalPolicy.objects.filter(tenant=tenant).order_by("-version").first()


def policy_save(
    *,
    tenant: Tenant,
    source: str,
    author: User | None,
    note: str = "",
    tool_schemas: Mapping[str, Mapping[str, Any] | None],
) -> ApprovalPolicy:
    """Check `source` and save it as the tenant's next version, written by `author`.

    `tool_schemas` is `{tool name: JSON Schema}` of the tools the policy may name (see
    `tool_arguments.tool_argument_schemas`). Raises PolicyInvalid, with every problem,
    and saves nothing."""
    groups = set(ApproverGroup.objects.filter(tenant=tenant).values_list("name", flat=True))
    policy_check(source, tool_schemas=tool_schemas, group_names=groups)
    for attempt in range(1, _SAVE_ATTEMPTS + 1):
        try:
            with transaction.atomic():
                # Locking the latest version makes a second save wait for the first to commit;
                # when there was none yet, the unique constraint decides and the loser retries.
                latest = (
                    ApprovalPolicy.objects.select_for_update(no_key=True)
                    .filter(tenant=tenant)
                    .order_by("-version")
                    .values_list("version", flat=True)
                    .first()
                )
                return ApprovalPolicy.objects.create(
                    tenant=tenant, version=(latest or 0) + 1, source=source, author=author, note=note
                )
        except IntegrityError:
            if attempt == _SAVE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")
