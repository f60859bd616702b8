"""Reads of pauses, already filtered to what the caller may see or decide."""

from collections.abc import Callable, Iterable
from datetime import datetime

from django.db.models import QuerySet

from approvals.models import Pause, PauseState
from runs.domain.pagination import Page, paginate
from runs.identity.callers import Caller
from runs.identity.visibility import decidable_among, pauses_decide_filter, pauses_filter
from runs.models import Run

# --- Pages (the approvals inbox) -------------------------------------------------------------


def pauses_decidable(*, caller: Caller) -> QuerySet[Pause]:
    """Open pauses the caller may decide, newest first: those it parked itself (same user
    and session), those its role decides, and those delegated to it."""
    return (
        Pause.objects.filter(pauses_decide_filter(caller), state=PauseState.PAUSED)
        .select_related("run", "run__owner")
        .order_by("-created_at", "-pk")
    )


def pause_decidable(*, caller: Caller, pause_id: str) -> Pause | None:
    return pauses_decidable(caller=caller).filter(pk=pause_id).first()


def pause_history(*, caller: Caller, limit: int = 100) -> QuerySet[Pause]:
    """Decided pauses the caller may see, most recently decided first."""
    decided = Pause.objects.filter(pauses_filter(caller), state=PauseState.RESUMED)
    return decided.select_related("run", "decided_by").order_by("-decided_at")[:limit]


def pause_open_for_run(*, run: Run) -> Pause | None:
    return run.pauses.filter(state=PauseState.PAUSED).order_by("-created_at").first()


def open_pauses_by_run(*, run_ids: list[str]) -> dict[str, Pause]:
    """The open pause of each of these runs (a run has at most one)."""
    pauses = Pause.objects.filter(run_id__in=run_ids, state=PauseState.PAUSED).order_by("created_at")
    return {pause.run_id: pause for pause in pauses}


def pause_of_run(*, run: Run, pause_id: str) -> Pause | None:
    return run.pauses.filter(pk=pause_id).first()


def pause_in_tenant(*, caller: Caller, pause_id: str) -> Pause | None:
    """A pause of the caller's tenant in any state, so a late decision can be told that
    it was already decided; the decision service applies the permission rule."""
    return Pause.objects.select_related("run").filter(pk=pause_id, tenant=caller.tenant).first()


# --- The /v1 API: pause.list snapshots (PROTOCOL §4) -----------------------------------------

PAUSE_STATUS_ANY = "any"


def pauses_visible(*, caller: Caller) -> QuerySet[Pause]:
    """Pauses of the caller's tenant it may see, in any state (runs.identity.visibility)."""
    return Pause.objects.filter(pauses_filter(caller)).select_related("tenant")


def token_visibility(*, caller: Caller, pause_ids: Iterable[str | None]) -> Callable[[str | None], bool]:
    """Which of these pauses' resume tokens the caller is shown: only where the decision
    rule would accept it (the pausing user and session, its role, or a delegation), so a
    token never reaches anyone it could not serve."""
    ids = {pk for pk in pause_ids if pk}
    if not ids:
        return lambda pause_id: False
    fields = ("pk", "tenant_id", "cause", "identity_user", "identity_session")
    allowed = decidable_among(caller, list(Pause.objects.filter(pk__in=ids, tenant=caller.tenant).only(*fields)))
    return lambda pause_id: pause_id in allowed


def tokens_shown(*, caller: Caller, pauses: list[Pause]) -> Callable[[str | None], bool]:
    """token_visibility for pauses already loaded (a pause.list page): no further query
    unless something was delegated."""
    allowed = decidable_among(caller, pauses)
    return lambda pause_id: pause_id in allowed


def pause_list(
    *,
    caller: Caller,
    status: str | None = PauseState.PAUSED,
    run_ids: list[str] | None = None,
    reasons: list[str] | None = None,
    causes: list[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    page: int = 1,
    page_size: int = 50,
) -> Page[Pause]:
    """A page of the pauses the caller may see, newest first. By default the open ones;
    `status="any"` lists decided pauses too."""
    pauses = pauses_visible(caller=caller)
    if status is not None and status != PAUSE_STATUS_ANY:
        pauses = pauses.filter(state=status)
    if run_ids is not None:
        pauses = pauses.filter(run_id__in=run_ids)
    if reasons is not None:
        pauses = pauses.filter(reason__in=reasons)
    if causes is not None:
        pauses = pauses.filter(cause__in=causes)
    if since is not None:
        pauses = pauses.filter(created_at__gte=since)
    if until is not None:
        pauses = pauses.filter(created_at__lt=until)
    return paginate(pauses.order_by("-created_at", "-pk"), page=page, page_size=page_size)
