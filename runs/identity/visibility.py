"""Who may see, steer and decide what: the one rule every read and every check uses.

What follows from a role is decided from the caller's membership, as indexed filters on
the tenant, the owner and the cause, so a read costs what it returns, never the tenant's
history. Object permissions (django-guardian rows) are consulted only for what was
delegated explicitly to one person (`pause_delegate`): a handful of rows per person.

- runs: the owner; approvers, operators and admins of the tenant; a tenant-wide admin
  scope; a person given `view_run` on that run.
- steering as if owner: operators and admins; a person given `steer_run`.
- pauses: the pausing user; approvers, operators and admins; a person given `view_pause`.
- deciding: the pausing (user, session); the roles the pause's cause names as its deciders
  (its registration, approvals.causes); a person given `decide_pause` on that pause.
"""

from dataclasses import dataclass

from django.contrib.contenttypes.models import ContentType
from django.db.models import Model, Q, QuerySet
from guardian.models import UserObjectPermission

from approvals import causes
from approvals.models import Pause
from runs.identity.callers import Caller
from runs.identity.sessions import PAGES_SESSION
from runs.models import Role, Run

# Roles that see every run and every pause of their tenant.
VIEWERS = frozenset({Role.APPROVER, Role.OPERATOR, Role.ADMIN})
# Roles that steer any run of their tenant as if they owned it.
STEERERS = frozenset({Role.OPERATOR, Role.ADMIN})


def role_decides(role: str | None, cause: str) -> bool:
    """Whether the role decides pauses of this cause, besides the pausing (user, session)."""
    registered = causes.active().find(cause)
    return registered is not None and role in registered.deciders


def _delegated(caller: Caller, codename: str, model: type[Model]) -> QuerySet:
    """Primary keys of the objects explicitly delegated to this person (one indexed lookup)."""
    return UserObjectPermission.objects.filter(
        user=caller.user, permission__codename=codename, content_type=ContentType.objects.get_for_model(model)
    ).values("object_pk")


def _is_delegated(caller: Caller, codename: str, obj: Model) -> bool:
    return _delegated(caller, codename, type(obj)).filter(object_pk=str(obj.pk)).exists()


# --- runs -------------------------------------------------------------------------------------


def sees_all_runs(caller: Caller, *, tenant_wide: bool | None = None) -> bool:
    """Whether the caller sees every run of its tenant. `tenant_wide=False` leaves out what
    only the admin scope of a token grants (the event stream's default view)."""
    return caller.role in VIEWERS or (caller.is_admin and tenant_wide is not False)


def runs_filter(caller: Caller, *, tenant_wide: bool | None = None) -> Q:
    """The runs of the caller's tenant it may see."""
    tenant = Q(tenant_id=caller.tenant.pk)
    if sees_all_runs(caller, tenant_wide=tenant_wide):
        return tenant
    return tenant & (Q(owner_id=caller.user.pk) | Q(pk__in=_delegated(caller, "view_run", Run)))


def may_view_run(caller: Caller, run: Run) -> bool:
    if run.tenant_id != caller.tenant.pk:
        return False
    return (
        caller.is_admin
        or caller.role in VIEWERS
        or run.owner_id == caller.user.pk
        or _is_delegated(caller, "view_run", run)
    )


def may_steer_as_owner(caller: Caller, run: Run) -> bool:
    """An operator (or a person given `steer_run`) steers as if it owned the run."""
    return run.tenant_id == caller.tenant.pk and (caller.role in STEERERS or _is_delegated(caller, "steer_run", run))


# --- pauses -----------------------------------------------------------------------------------


def pauses_filter(caller: Caller) -> Q:
    """The pauses of the caller's tenant it may see, in any state."""
    tenant = Q(tenant_id=caller.tenant.pk)
    if caller.is_admin or caller.role in VIEWERS:
        return tenant
    return tenant & (Q(identity_user=caller.user.username) | Q(pk__in=_delegated(caller, "view_pause", Pause)))


def may_view_pause(caller: Caller, pause: Pause) -> bool:
    if pause.tenant_id != caller.tenant.pk:
        return False
    return (
        caller.is_admin
        or caller.role in VIEWERS
        or pause.identity_user == caller.user.username
        or _is_delegated(caller, "view_pause", pause)
    )


def _decidable_causes(caller: Caller) -> list[str]:
    return [cause.name for cause in causes.active().all() if caller.role in cause.deciders]


def pauses_decide_filter(caller: Caller) -> Q:
    """The pauses of the caller's tenant it may decide (open or not: the caller filters)."""
    rule = Q(identity_user=caller.user.username, identity_session=caller.session)
    causes = _decidable_causes(caller)
    if causes:
        rule |= Q(cause__in=causes)
    rule |= Q(pk__in=_delegated(caller, "decide_pause", Pause))
    return Q(tenant_id=caller.tenant.pk) & rule


def owns_pause(caller: Caller, pause: Pause) -> bool:
    return pause.identity_user == caller.user.username and pause.identity_session == caller.session


def pause_owner_words(pause: Pause) -> str:
    """Whom an owner-only step of a pause (a sign-in, a remote agent's answer) waits for, in
    plain words: the person, and the program's session when she started the run from one."""
    if pause.identity_session == PAGES_SESSION:
        return pause.identity_user
    return f"{pause.identity_user} (session {pause.identity_session})"


def may_decide_pause(caller: Caller, pause: Pause) -> bool:
    if pause.tenant_id != caller.tenant.pk:
        return False
    return (
        owns_pause(caller, pause)
        or role_decides(caller.role, pause.cause)
        or _is_delegated(caller, "decide_pause", pause)
    )


def decidable_among(caller: Caller, pauses: list[Pause]) -> set[str]:
    """Which of these pauses the caller may decide: one query at most (the delegations)."""
    allowed = {
        p.pk
        for p in pauses
        if p.tenant_id == caller.tenant.pk and (owns_pause(caller, p) or role_decides(caller.role, p.cause))
    }
    rest = [str(p.pk) for p in pauses if p.pk not in allowed and p.tenant_id == caller.tenant.pk]
    if rest:
        allowed |= set(
            _delegated(caller, "decide_pause", Pause).filter(object_pk__in=rest).values_list("object_pk", flat=True)
        )
    return allowed


# --- live streams -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Viewer:
    """The rule's inputs for one live stream, taken when it opens and at each re-check, so
    an event pushed with its run's owner and its pause's identity (runs.domain.events) is
    delivered, or not, without reading the database. The same rule as the queries above."""

    user_id: int
    username: str
    session: str
    role: str | None
    runs: frozenset[str] = frozenset()  # runs delegated to this person (`view_run`)
    decides: frozenset[str] = frozenset()  # pauses delegated to this person (`decide_pause`)
    all_runs: bool = False  # sees_all_runs beyond the role: an admin-scoped tenant-wide stream

    def sees_run(self, *, owner_id: int, run_id: str) -> bool:
        return self.all_runs or self.role in VIEWERS or owner_id == self.user_id or run_id in self.runs

    def may_decide(self, *, pause_id: str, user: str, session: str, cause: str) -> bool:
        return (
            (user == self.username and session == self.session)
            or role_decides(self.role, cause)
            or pause_id in self.decides
        )


def viewer_of(caller: Caller, *, tenant_wide: bool = False) -> Viewer:
    """A live stream's Viewer; `tenant_wide` as in `sees_all_runs` (an SSE stream's ?admin=1;
    pages have no token scopes, so no widening)."""
    return Viewer(
        user_id=caller.user.pk,
        username=caller.user.username,
        session=caller.session,
        role=caller.role,
        runs=frozenset(_delegated(caller, "view_run", Run).values_list("object_pk", flat=True)),
        decides=frozenset(_delegated(caller, "decide_pause", Pause).values_list("object_pk", flat=True)),
        all_runs=tenant_wide and sees_all_runs(caller, tenant_wide=True),
    )


def viewers_of(callers: list[Caller]) -> list[Viewer]:
    """`viewer_of` for many callers at once (the sockets' batched re-check): one query for
    every delegation among them, whatever their number."""
    runs, decides = ContentType.objects.get_for_model(Run), ContentType.objects.get_for_model(Pause)
    delegated: dict[tuple[int, str], set[str]] = {}
    rows = UserObjectPermission.objects.filter(
        Q(permission__codename="view_run", content_type=runs)
        | Q(permission__codename="decide_pause", content_type=decides),
        user_id__in={caller.user.pk for caller in callers},
    ).values_list("user_id", "permission__codename", "object_pk")
    for user_id, codename, object_pk in rows:
        delegated.setdefault((user_id, codename), set()).add(object_pk)
    return [
        Viewer(
            user_id=caller.user.pk,
            username=caller.user.username,
            session=caller.session,
            role=caller.role,
            runs=frozenset(delegated.get((caller.user.pk, "view_run"), ())),
            decides=frozenset(delegated.get((caller.user.pk, "decide_pause"), ())),
        )
        for caller in callers
    ]
