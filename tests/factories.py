"""factory-boy factories for the rows tests need; call `.create(...)`, which is typed.

Rows with rules of their own are made through the product: a membership through
`membership_grant` (so role groups and object permissions follow), a run through
`run_start`, a pause by driving a gated run until it parks. Plain rows (tenants, people,
audit records) are created directly."""

from typing import Any

import factory
from django.contrib.auth.models import User

from approvals.models import DecisionRefusal, Pause
from runs.application import run_start
from runs.identity.callers import Caller
from runs.identity.permissions import membership_grant
from runs.models import Membership, Role, Run, Tenant
from runs.runtime.dispatch import drain


class TenantFactory(factory.django.DjangoModelFactory[Tenant]):
    class Meta:
        model = Tenant

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda tenant: tenant.slug.capitalize())


class UserFactory(factory.django.DjangoModelFactory[User]):
    """A person who can sign in with the password `<username>-password`."""

    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"person{n}")
    password = factory.django.Password(factory.LazyAttribute(lambda user: f"{user.username}-password"))


class SuperuserFactory(UserFactory):
    is_staff = True
    is_superuser = True


class MembershipFactory(factory.django.DjangoModelFactory[Membership]):
    class Meta:
        model = Membership

    tenant = factory.SubFactory(TenantFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.MEMBER

    @classmethod
    def _create(cls, model_class: type[Membership], *, tenant: Tenant, user: User, role: str) -> Membership:
        return membership_grant(tenant=tenant, user=user, role=role)


class RunFactory(factory.Factory[Run]):
    """A run started by `caller` (nothing advances it: tests drive the runtime)."""

    class Meta:
        model = Run

    query = "count to 3"
    agent_id = "countdown"

    @classmethod
    def _create(cls, model_class: type[Run], *, caller: Caller, **kwargs: Any) -> Run:
        run, _ = run_start(caller=caller, **kwargs)
        return run


class PauseFactory(factory.Factory[Pause]):
    """The pause a run of `caller`'s parks on: the run is started and the runtime drained
    (every ready run advances) until it parks. By default a `probe` run on its approval
    gate (the `probe` fixture registers that agent)."""

    class Meta:
        model = Pause

    query = "launch"
    agent_id = "probe"

    @classmethod
    def _create(cls, model_class: type[Pause], *, caller: Caller, **kwargs: Any) -> Pause:
        run = RunFactory.create(caller=caller, **kwargs)
        drain()
        return Pause.objects.get(run=run)


class DecisionRefusalFactory(factory.django.DjangoModelFactory[DecisionRefusal]):
    """An audited refused decision (written by approvals.domain.refusals in the product)."""

    class Meta:
        model = DecisionRefusal

    actor_tenant = "acme"
    actor_user = "alice"
    actor_session = "s1"
    method = "approve"
    code = "not_found"
