"""The verified identity triple (tenant, user, session) every service call acts as."""

from dataclasses import dataclass, field
from functools import cached_property

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from .errors import AuthRejected, IdentityRequired
from .models import Membership, Role, Tenant

User = get_user_model()

ADMIN_SCOPE = "admin"


@dataclass(frozen=True)
class Caller:
    tenant: Tenant
    user: "User"
    session: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    address: str | None = None

    @cached_property
    def role(self) -> str | None:
        membership = Membership.objects.filter(tenant=self.tenant, user=self.user).only("role").first()
        return membership.role if membership else None

    @property
    def is_admin(self) -> bool:
        return ADMIN_SCOPE in self.scopes or self.role == Role.ADMIN

    def describe(self) -> str:
        return f"{self.tenant.slug}/{self.user.username}/{self.session}"


def caller_resolve(
    *, tenant: str, user: str, session: str, scopes=(), address: str | None = None, provision: bool = True
) -> Caller:
    """Turn a verified triple into a Caller. A user seen for the first time in a known
    tenant is provisioned as a member; an unknown tenant, or a user who belongs to
    another tenant, is refused."""
    if not (tenant and user and session):
        raise IdentityRequired("tenant, user and session are all required")
    tenant_obj = Tenant.objects.filter(slug=tenant).first()
    if tenant_obj is None:
        raise AuthRejected("unknown tenant")
    user_obj = User.objects.filter(username=user).first()
    if user_obj is None and provision:
        user_obj = _provision(tenant_obj, user)
    if user_obj is None or not user_obj.is_active:
        raise AuthRejected("unknown user")
    if not Membership.objects.filter(tenant=tenant_obj, user=user_obj).exists():
        raise AuthRejected("the user is not a member of this tenant")
    return Caller(tenant=tenant_obj, user=user_obj, session=session, scopes=frozenset(scopes), address=address)


def _provision(tenant: Tenant, username: str):
    from .permissions import membership_grant

    try:
        with transaction.atomic():
            user = User.objects.create_user(username=username)  # no usable password: API only
            membership_grant(tenant=tenant, user=user, role=Role.MEMBER)
            return user
    except IntegrityError:  # provisioned concurrently by another request
        return User.objects.filter(username=username).first()
