"""Object permissions (django-guardian), granted to per-tenant role groups when runs and
pauses are created, so a membership change takes effect at once and never crosses tenants."""

from django.contrib.auth.models import Group
from django.db import transaction
from guardian.shortcuts import assign_perm

from . import events
from .models import Membership, Role, Run, Tenant


def role_group(tenant: Tenant, role: str) -> Group:
    group, _ = Group.objects.get_or_create(name=f"tenant-{tenant.pk}-{role}")
    return group


@transaction.atomic
def membership_grant(*, tenant: Tenant, user, role: str) -> Membership:
    """Create or change a membership and move the user into the matching role group."""
    if role not in Role.values:
        raise ValueError(f"unknown role {role!r}")
    membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    user.groups.remove(*Group.objects.filter(name__startswith=f"tenant-{tenant.pk}-"))
    user.groups.add(role_group(tenant, role))
    return membership


@transaction.atomic
def membership_revoke(*, tenant: Tenant, user) -> None:
    Membership.objects.filter(tenant=tenant, user=user).delete()
    user.groups.remove(*Group.objects.filter(name__startswith=f"tenant-{tenant.pk}-"))
    # The person's open streams re-check at once and close (their periodic re-check is the backstop).
    transaction.on_commit(lambda: events.close_streams(user_id=user.pk, tenant_id=tenant.pk))


def grant_run_permissions(run: Run) -> None:
    assign_perm("runs.view_run", run.owner, run)
    for role in (Role.APPROVER, Role.OPERATOR, Role.ADMIN):
        assign_perm("runs.view_run", role_group(run.tenant, role), run)
    for role in (Role.OPERATOR, Role.ADMIN):
        assign_perm("runs.steer_run", role_group(run.tenant, role), run)


# Which role groups may decide a pause of each cause, besides the pausing (user, session).
DECIDERS_BY_CAUSE = {
    "hitl_approval": (Role.APPROVER, Role.ADMIN),
    "operator": (Role.OPERATOR, Role.ADMIN),
    "tool_oauth": (Role.ADMIN,),
    "a2a": (Role.ADMIN,),
}


def grant_pause_permissions(pause) -> None:
    assign_perm("approvals.view_pause", pause.run.owner, pause)
    for role in (Role.APPROVER, Role.OPERATOR, Role.ADMIN):
        assign_perm("approvals.view_pause", role_group(pause.tenant, role), pause)
    for role in DECIDERS_BY_CAUSE[pause.cause]:
        assign_perm("approvals.decide_pause", role_group(pause.tenant, role), pause)
