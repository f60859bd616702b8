"""Memberships (the role a person holds in a tenant) and explicit per-object delegations.

What a role permits is decided from the membership at read time (runs.identity.visibility),
so a membership change takes effect at once and never crosses tenants; the per-tenant role
groups are kept in step for the admin site."""

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Model
from django.dispatch import Signal
from guardian.shortcuts import assign_perm

from runs.models import Membership, Role, Tenant

# Sent after the commit that changed what a person may see in a tenant (user_id, tenant_id):
# the application closes the person's open streams, which re-check at once.
access_changed = Signal()


def _access_changed_on_commit(user_id: int, tenant_id: int) -> None:
    transaction.on_commit(lambda: access_changed.send(sender=Membership, user_id=user_id, tenant_id=tenant_id))


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
    _access_changed_on_commit(user.pk, tenant.pk)  # what they may see follows the role
    return membership


@transaction.atomic
def membership_revoke(*, tenant: Tenant, user: User) -> None:
    # Its delegations end and the person's open streams close at once (runs.application.departures).
    Membership.objects.filter(tenant=tenant, user=user).delete()
    user.groups.remove(*Group.objects.filter(name__startswith=f"tenant-{tenant.pk}-"))


def delegate(obj: Model, *, user: AbstractBaseUser, permission: str) -> None:
    """Give one person one permission on one object (`view_run`, `steer_run`,
    `view_pause`, `decide_pause`): the only object-permission rows Harbor writes. What a
    role grants needs none (see runs.identity.visibility)."""
    if permission not in DELEGABLE:
        raise ValueError(f"unknown permission {permission!r}")
    if not Membership.objects.filter(tenant_id=obj.tenant_id, user_id=user.pk).exists():  # type: ignore[attr-defined]
        raise ValueError("delegation stays within the tenant: the person is not a member")
    assign_perm(permission, user, obj)
    _access_changed_on_commit(user.pk, obj.tenant_id)  # type: ignore[attr-defined]


DELEGABLE = frozenset({"view_run", "steer_run", "view_pause", "decide_pause"})
