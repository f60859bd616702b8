"""Reads of runs and events, already filtered to what the caller may see.

The pages (console, run page, websockets) and the /v1 API (tasks.list, tasks.get, the SSE
stream) read through the same filters, so no client sees more than the protocol allows."""

from django.db.models import Count, QuerySet

from approvals.domain.selectors import pause_snapshots, pauses_visible
from runs.domain.errors import NotFound
from runs.domain.pagination import PAGE_SIZE_DEFAULT, paginate
from runs.identity.callers import Caller
from runs.identity.visibility import runs_filter, sees_all_runs
from runs.models import Event, Membership, Run, RunStatus, SteeringInstruction, Tenant

REDACTED = "<redacted>"


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


# --- Visibility (runs.identity.scopes.can_view_run, as queries) --------------------------------------


# Where the pages keep the tenant a person chose to work in (its pk).
ACTIVE_TENANT_SESSION_KEY = "harbor_tenant"


def membership_for_user(*, user, session=None) -> Membership | None:
    """The membership a signed-in person works in: the tenant chosen in `session` (the
    Django session, or a websocket scope's) while they still belong to it, else their first
    membership. Pages and websockets pass their session, so both speak for the same tenant."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    memberships = Membership.objects.select_related("tenant").filter(user=user).order_by("created_at", "pk")
    active = session.get(ACTIVE_TENANT_SESSION_KEY) if session is not None else None
    if active is not None:
        chosen = memberships.filter(tenant_id=active).first()
        if chosen is not None:
            return chosen
    return memberships.first()


def memberships_of(*, user) -> list[Membership]:
    """Every tenant a person belongs to, for the pages' tenant switcher."""
    return list(Membership.objects.select_related("tenant").filter(user=user).order_by("tenant__slug"))


def runs_visible(*, caller: Caller, status: str | None = None, tenant_wide: bool | None = None) -> QuerySet[Run]:
    """Runs of the caller's tenant it may see, newest first (runs.identity.visibility).
    `tenant_wide=False` leaves the admin scope's widening out (the event stream's default)."""
    runs = Run.objects.filter(runs_filter(caller, tenant_wide=tenant_wide))
    if status is not None:
        runs = runs.filter(status=status)
    return runs.select_related("tenant", "owner").order_by("-created_at", "-pk")


def run_visible(*, caller: Caller, run_id) -> Run | None:
    """One run the caller may see; another tenant's and an unknown run are both None."""
    if not isinstance(run_id, str) or not run_id:
        return None
    return runs_visible(caller=caller).filter(pk=run_id).first()


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


def task_row(run: Run) -> dict:
    return {
        "task_id": run.pk,
        "status": run.status,
        "agent_id": run.agent_id,
        "query": (run.checkpoint or {}).get("query", run.goal),
        "goal": run.goal,
        "priority": run.priority,
        "parent_task_id": run.parent_id,
        "cancel_policy": run.cancel_policy,
        "identity": {"tenant": run.tenant.slug, "user": run.owner.username, "session": run.session},
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "answer": run.answer or None,
        "error": {"code": run.failure_code, "message": run.failure_message} if run.failure_code else None,
    }


def task_list(
    *,
    caller: Caller,
    status: str | None = None,
    parent: str | None = None,
    page: int = 1,
    page_size: int = PAGE_SIZE_DEFAULT,
) -> dict:
    """A page of the caller's visible tasks, newest first. `counts` covers every visible
    task matching the other filters, whatever the status filter (for status tabs)."""
    runs = runs_visible(caller=caller)
    if parent is not None:
        runs = runs.filter(parent_id=parent)
    counts = run_status_counts(caller=caller, runs=runs)
    if status is not None:
        runs = runs.filter(status=status)
    rows, info = paginate(runs, page=page, page_size=page_size)
    return {"tasks": [task_row(run) for run in rows], **info, "counts": counts}


def steering_row(instruction: SteeringInstruction) -> dict:
    payload = dict(instruction.payload)
    if "token" in payload:  # spent, but a token is shown only with its pause
        payload["token"] = REDACTED
    return {
        "method": instruction.instruction,
        "payload": payload,
        "event_id": instruction.event_id,
        "state": instruction.state,
        "outcome": instruction.outcome,
        "actor": {"user": instruction.actor.username, "session": instruction.actor_session},
        "created_at": _iso(instruction.created_at),
        "settled_at": _iso(instruction.settled_at),
    }


def task_detail(*, caller: Caller, run_id) -> dict:
    """The task row, its pauses (as pause.list snapshots) and its steering history."""
    run = run_visible(caller=caller, run_id=run_id)
    if run is None:
        raise NotFound("no such run")
    pauses = pauses_visible(caller=caller).filter(run=run).order_by("created_at", "pk")
    return {
        **task_row(run),
        "pauses": pause_snapshots(pauses, caller=caller),
        "steering": [steering_row(s) for s in run_steering(run=run)],
    }
