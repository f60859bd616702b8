"""Reads of runs and events, already filtered to what the caller may see.

The pages (console, run page, websockets) and the /v1 API (tasks.list, tasks.get, the SSE
stream) read through the same filters, so no client sees more than the protocol allows."""

from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.contrib.sessions.backends.base import SessionBase
from django.db.models import Count, F, QuerySet

from runs.domain.pagination import PAGE_SIZE_DEFAULT, Page, paginate
from runs.identity.callers import Caller
from runs.identity.visibility import runs_filter, sees_all_runs
from runs.models import Event, Membership, Run, RunStatus, SteeringInstruction, Tenant

# --- Visibility (runs.identity.scopes.can_view_run, as queries) --------------------------------------


# Where the pages keep the tenant a person chose to work in (its pk).
ACTIVE_TENANT_SESSION_KEY = "harbor_tenant"


def membership_for_user(
    *, user: User | AnonymousUser | None, session: SessionBase | dict[str, Any] | None = None
) -> Membership | None:
    """The membership a signed-in person works in: the tenant chosen in `session` (the
    Django session, or a websocket scope's) while they still belong to it, else their first
    membership. Pages and websockets pass their session, so both speak for the same tenant."""
    if user is None or isinstance(user, AnonymousUser) or not user.is_authenticated:
        return None
    memberships = Membership.objects.select_related("tenant").filter(user=user).order_by("created_at", "pk")
    active = session.get(ACTIVE_TENANT_SESSION_KEY) if session is not None else None
    if active is not None:
        chosen = memberships.filter(tenant_id=active).first()
        if chosen is not None:
            return chosen
    return memberships.first()


def memberships_of(*, user: User) -> list[Membership]:
    """Every tenant a person belongs to, for the pages' tenant switcher."""
    return list(Membership.objects.select_related("tenant").filter(user=user).order_by("tenant__slug"))


def runs_visible(*, caller: Caller, status: str | None = None, tenant_wide: bool | None = None) -> QuerySet[Run]:
    """Runs of the caller's tenant it may see, newest first (runs.identity.visibility).
    `tenant_wide=False` leaves the admin scope's widening out (the event stream's default)."""
    runs = Run.objects.filter(runs_filter(caller, tenant_wide=tenant_wide))
    if status is not None:
        runs = runs.filter(status=status)
    return runs.select_related("tenant", "owner").order_by("-created_at", "-pk")


def run_visible(*, caller: Caller, run_id: object) -> Run | None:
    """One run the caller may see; another tenant's and an unknown run are both None."""
    if not isinstance(run_id, str) or not run_id:
        return None
    return runs_visible(caller=caller).filter(pk=run_id).first()


def run_started_by(*, caller: Caller, run_id: str) -> Run | None:
    """The run this caller's start made under `run_id`, if it made one."""
    return Run.objects.filter(pk=run_id, tenant=caller.tenant, owner=caller.user, session=caller.session).first()


def run_status_counts(*, caller: Caller, runs: QuerySet[Run] | None = None) -> dict[str, int]:
    runs = runs_visible(caller=caller) if runs is None else runs
    counts = {value: 0 for value in RunStatus.values}
    counts.update(runs.order_by().values("status").annotate(n=Count("pk")).values_list("status", "n"))
    return counts


def run_steering(*, run: Run) -> list[SteeringInstruction]:
    return list(run.steering.select_related("actor").order_by("id"))


def run_events(*, run: Run) -> list[Event]:
    return list(run.events.select_related("run", "tenant").order_by("sequence"))


# --- Events (websockets and SSE) -------------------------------------------------------------


def events_visible(*, caller: Caller, tenant_wide: bool | None = None) -> QuerySet[Event]:
    events = Event.objects.filter(tenant=caller.tenant)
    if not sees_all_runs(caller, tenant_wide=tenant_wide):
        events = events.filter(run__in=Run.objects.filter(runs_filter(caller, tenant_wide=tenant_wide)).values("pk"))
    return events.select_related("run").order_by("sequence")


def events_head(*, tenant_id: int) -> int:
    """The tenant's last committed sequence (the cursor row commits with its events)."""
    return Tenant.objects.filter(pk=tenant_id).values_list("event_sequence", flat=True).first() or 0


def events_heads(*, tenant_ids: Iterable[int]) -> dict[int, tuple[int, str]]:
    """`events_head` of several tenants in one query, each with its slug."""
    rows = Tenant.objects.filter(pk__in=set(tenant_ids)).values_list("pk", "event_sequence", "slug")
    return {pk: (sequence, slug) for pk, sequence, slug in rows}


def events_between(*, tenant_id: int, after: int, upto: int) -> list[tuple[Event, int]]:
    """The tenant's whole log in (after, upto], each event with its run's owner: the live
    sockets' shared read, filtered per socket by `visibility.Viewer` afterwards."""
    rows = Event.objects.filter(tenant_id=tenant_id, sequence__gt=after, sequence__lte=upto)
    return [(row, row.owner_id) for row in rows.annotate(owner_id=F("run__owner_id")).order_by("sequence")]


def events_after(
    *,
    caller: Caller,
    after: int,
    run_id: str | None = None,
    types: frozenset[str] | None = None,
    tenant_wide: bool = False,
    limit: int = 200,
) -> list[Event]:
    """The live streams' read (SSE and websockets): the next visible events after the cursor,
    filtered on the server."""
    events = events_visible(caller=caller, tenant_wide=tenant_wide).filter(sequence__gt=after)
    if run_id is not None:
        events = events.filter(run_id=run_id)
    if types:
        events = events.filter(type__in=types)
    return list(events[:limit])


# --- The /v1 API: tasks.list and tasks.get ---------------------------------------------------


def task_list(
    *,
    caller: Caller,
    status: str | None = None,
    parent: str | None = None,
    page: int = 1,
    page_size: int = PAGE_SIZE_DEFAULT,
) -> tuple[Page[Run], dict[str, int]]:
    """A page of the caller's visible tasks, newest first, and counts by status covering every
    visible task matching the other filters, whatever the status filter (for status tabs)."""
    runs = runs_visible(caller=caller)
    if parent is not None:
        runs = runs.filter(parent_id=parent)
    counts = run_status_counts(caller=caller, runs=runs)
    if status is not None:
        runs = runs.filter(status=status)
    return paginate(runs, page=page, page_size=page_size), counts
