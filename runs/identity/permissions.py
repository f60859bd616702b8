"""Object permissions (django-guardian), granted to per-tenant role groups when runs and
pauses are created, so a membership change takes effect at once and never crosses tenants."""

from typing import TYPE_CHECKING

from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from guardian.models import GroupObjectPermission, UserObjectPermission

from runs.domain import events
from runs.models import Membership, Role, Run, Tenant

if TYPE_CHECKING:  # approvals.models imports runs.models; the annotation needs no import at runtime
    from approvals.models import Pause


def _group_name(tenant_id: int, role: str) -> str:
    return f"tenant-{tenant_id}-{role}"


def role_group(tenant: Tenant, role: str) -> Group:
    group, _ = Group.objects.get_or_create(name=_group_name(tenant.pk, role))
    return group


@transaction.atomic
def membership_grant(*, tenant: Tenant, user: User, role: str) -> Membership:
    """Create or change a membership and move the user into the matching role group."""
    if role not in Role.values:
        raise ValueError(f"unknown role {role!r}")
    membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    user.groups.remove(*Group.objects.filter(name__startswith=f"tenant-{tenant.pk}-"))
    user.groups.add(role_group(tenant, role))
    return membership


@transaction.atomic
def membership_revoke(*, tenant: Tenant, user: User) -> None:
    Membership.objects.filter(tenant=tenant, user=user).delete()
    user.groups.remove(*Group.objects.filter(name__startswith=f"tenant-{tenant.pk}-"))
    # The person's open streams re-check at once and close (their periodic re-check is the backstop).
    transaction.on_commit(lambda: events.close_streams(user_id=user.pk, tenant_id=tenant.pk))


def _grant(obj: "Run | Pause", *, owner: User, group_perms: dict[str, tuple[str, ...]]) -> None:
    """Write a new object's permission rows in bulk: `view` for its owner, and each
    permission to the tenant's role groups named. (guardian's `assign_perm` looks up each
    permission, group and row one at a time: some forty statements per pause.)"""
    content_type = ContentType.objects.get_for_model(obj)
    view = f"view_{obj._meta.model_name}"
    perms = {
        p.codename: p for p in Permission.objects.filter(content_type=content_type, codename__in=[view, *group_perms])
    }
    roles = {role for granted in group_perms.values() for role in granted}
    names = {role: _group_name(obj.tenant_id, role) for role in roles}
    groups = {group.name: group for group in Group.objects.filter(name__in=names.values())}
    for name in set(names.values()) - set(groups):  # a role no one has held in this tenant yet
        groups[name] = Group.objects.get_or_create(name=name)[0]
    key = {"content_type": content_type, "object_pk": str(obj.pk)}
    UserObjectPermission.objects.create(user=owner, permission=perms[view], **key)
    GroupObjectPermission.objects.bulk_create(
        [
            GroupObjectPermission(group=groups[names[role]], permission=perms[codename], **key)
            for codename, granted in group_perms.items()
            for role in granted
        ]
    )


def grant_run_permissions(run: Run) -> None:
    _grant(
        run,
        owner=run.owner,
        group_perms={
            "view_run": (Role.APPROVER, Role.OPERATOR, Role.ADMIN),
            "steer_run": (Role.OPERATOR, Role.ADMIN),
        },
    )


# Which role groups may decide a pause of each cause, besides the pausing (user, session).
DECIDERS_BY_CAUSE = {
    "hitl_approval": (Role.APPROVER, Role.ADMIN),
    "operator": (Role.OPERATOR, Role.ADMIN),
    "tool_oauth": (Role.ADMIN,),
    "a2a": (Role.ADMIN,),
}


def grant_pause_permissions(pause: "Pause") -> None:
    _grant(
        pause,
        owner=pause.run.owner,
        group_perms={
            "view_pause": (Role.APPROVER, Role.OPERATOR, Role.ADMIN),
            "decide_pause": DECIDERS_BY_CAUSE[pause.cause],
        },
    )
