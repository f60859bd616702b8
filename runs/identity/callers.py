"""The verified identity triple (tenant, user, session) every service call acts as, and how
a verified user name becomes one person.

A person is one Django user. A verified (issuer, user) maps to one person: the issuer's
namespace ("" for this server's own accounts, which password logins use too) plus the user
name after normalisation. A person may hold memberships in several tenants; the tenant of
a request is the token's `tenant` claim (on the pages, the tenant chosen in the session).
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypedDict

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.db import IntegrityError, transaction
from django.http import HttpRequest

from runs.identity.permissions import membership_grant
from runs.kernel.errors import AuthRejected, IdentityRequired
from runs.kernel.names import NAMESPACE_SEPARATOR, name_normalise
from runs.models import Membership, Role, Tenant

if TYPE_CHECKING:  # the project keeps Django's own user model
    from django.contrib.auth.models import User
else:
    User = get_user_model()

ADMIN_SCOPE = "admin"
_TENANT_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,49}$")


def person_username(name: str, namespace: str = "") -> str:
    """The account name of a verified (issuer namespace, user name)."""
    canonical = name_normalise(name)
    return f"{namespace}{NAMESPACE_SEPARATOR}{canonical}" if namespace else canonical


@dataclass(frozen=True)
class Caller:
    tenant: Tenant
    user: User
    session: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    address: str | None = None
    namespace: str = ""  # the token issuer's (see person_username)

    def names_me(self, name: object) -> bool:
        """Whether a user name, spelled as the token or a body may spell it (`Alice`, or an
        external issuer's `carol`), names this caller."""
        if not isinstance(name, str):
            return False
        if name == self.user.username:
            return True
        try:
            return person_username(name, self.namespace) == self.user.username
        except AuthRejected:
            return False

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
    *,
    tenant: str,
    user: str,
    session: str,
    scopes: Iterable[str] = (),
    address: str | None = None,
    provision: bool = True,
    namespace: str = "",
) -> Caller:
    """Turn a verified triple into a Caller. A person seen for the first time is provisioned
    as a member of the tenant they came in through; an existing person must already be a
    member of the request's tenant (memberships in further tenants are granted by an
    admin, so a revoked membership stays revoked). An unknown tenant is refused unless
    `HARBOR_AUTO_PROVISION_TENANTS` is on."""
    if not (tenant and user and session):
        raise IdentityRequired("tenant, user and session are all required")
    username = person_username(user, namespace)
    identity = _Identity(session=session, scopes=frozenset(scopes), address=address, namespace=namespace)
    member = _active_member(tenant, username)
    if member is not None:
        tenant_obj, user_obj, role = member
        caller = Caller(tenant=tenant_obj, user=user_obj, **identity)
        caller.__dict__["role"] = role  # the cached_property's own slot: nothing reads it again
        return caller
    return _resolve_newcomer(tenant, username, identity, provision=provision)


def _active_member(tenant: str, username: str) -> tuple[Tenant, User, str] | None:
    """The usual case, an active member, in one statement: the tenant, the person and the
    role."""
    member = (
        Membership.objects.select_related("tenant", "user")
        .filter(tenant__slug=tenant, user__username=username, user__is_active=True)
        .first()
    )
    return None if member is None else (member.tenant, member.user, member.role)


class _Identity(TypedDict):
    session: str
    scopes: frozenset[str]
    address: str | None
    namespace: str


def _resolve_newcomer(tenant: str, username: str, identity: _Identity, *, provision: bool) -> Caller:
    """Everyone else: a person or tenant to provision, or a refusal that says why."""
    tenant_obj = Tenant.objects.filter(slug=tenant).first()
    new_tenant = False
    if tenant_obj is None and provision and getattr(settings, "HARBOR_AUTO_PROVISION_TENANTS", False):
        tenant_obj, new_tenant = _provision_tenant(tenant)
    if tenant_obj is None:
        raise AuthRejected("unknown tenant")
    user_obj = User.objects.filter(username=username).first()
    if user_obj is None and provision:
        user_obj = _provision(tenant_obj, username)
    if user_obj is None or not user_obj.is_active:
        raise AuthRejected("unknown user")
    if new_tenant and provision:
        # Nobody can have been removed from a tenant created just now.
        _grant_member(tenant_obj, user_obj)
    if not Membership.objects.filter(tenant=tenant_obj, user=user_obj).exists():
        raise AuthRejected("the user is not a member of this tenant")
    return Caller(tenant=tenant_obj, user=user_obj, **identity)


def _provision_tenant(slug: str) -> tuple[Tenant | None, bool]:
    if not _TENANT_SLUG.match(slug):
        return None, False
    tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug})
    return tenant, created


def _grant_member(tenant: Tenant, user: User) -> None:
    if not Membership.objects.filter(tenant=tenant, user=user).exists():
        membership_grant(tenant=tenant, user=user, role=Role.MEMBER)


def _provision(tenant: Tenant, username: str) -> User | None:
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=username)  # no usable password: API only
            membership_grant(tenant=tenant, user=user, role=Role.MEMBER)
            return user
    except IntegrityError:  # provisioned concurrently by another request
        return User.objects.filter(username=username).first()


# --- Password sign-in (the pages and the admin) ------------------------------------------------


def login_username(request: HttpRequest | None, credentials: Mapping[str, Any] | None) -> str:
    """The name a sign-in attempt is for, normalised, so `Alice` and `alice ` count as one
    account towards the lockout (django-axes' AXES_USERNAME_CALLABLE)."""
    username = (credentials or {}).get("username") or ""
    try:
        return name_normalise(username)
    except AuthRejected:
        return username


class LoginBackend(ModelBackend):
    """Password sign-in with the user name normalised as a token's is."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        if username is not None:
            try:
                username = name_normalise(username)
            except AuthRejected:
                return None
        return super().authenticate(request, username=username, password=password, **kwargs)
