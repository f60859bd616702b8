"""Reads of pauses, already filtered to what the caller may see or decide."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Prefetch, Q, QuerySet

from approvals.models import Pause, PauseState
from runs.domain import selectors
from runs.domain.pagination import Page, paginate
from runs.domain.tokens import SIGN_IN_SEALED, sign_in_unseal
from runs.identity.callers import Caller
from runs.identity.visibility import decidable_among, pauses_decide_filter, pauses_filter
from runs.kernel.errors import NotFound
from runs.models import Run, SteeringInstruction

# --- Pages (the approvals inbox) -------------------------------------------------------------


def pauses_decidable(*, caller: Caller) -> QuerySet[Pause]:
    """Open pauses the caller may decide, newest first: those it parked itself (same user
    and session), those its role decides, and those delegated to it."""
    return (
        Pause.objects.filter(pauses_decide_filter(caller), state=PauseState.PAUSED)
        .select_related("run", "run__owner")
        .order_by("-created_at", "-pk")
    )


# Older cards are reached by keyset: a cursor names the last card shown, so a page costs
# the same at any depth and a pause opened or decided meanwhile shifts nothing.
CURSOR_TIME = "%Y%m%d%H%M%S%f"
# A card never shows the tool context, the sealed token or the run's checkpoint: left
# unread, they cost nothing however long the run's history.
CARD_UNREAD = (
    "token_sealed",
    "tool_context",
    "handle_keys",
    "decision_input",
    "run__context",
    "run__messages",
    "run__checkpoint",
    "run__answer",
)


# Counted up to here, then shown as "1000+": the count reads every open row it counts,
# scattered across the whole history's pages, so an exact one grows with the open pauses.
INBOX_COUNT_CAP = 1000


@dataclass(frozen=True)
class OpenCount:
    value: int  # at most INBOX_COUNT_CAP
    capped: bool  # more open pauses than that

    def __str__(self) -> str:
        return f"{self.value}+" if self.capped else str(self.value)


@dataclass(frozen=True)
class InboxPage:
    pauses: list[Pause]
    total: OpenCount  # every open pause the caller may decide, not only this page's
    next_cursor: str | None  # the cursor of the page after this one, None on the last


def pauses_decidable_count(*, caller: Caller) -> OpenCount:
    """How many open pauses the caller may decide, counted up to INBOX_COUNT_CAP."""
    counted = pauses_decidable(caller=caller).order_by().values("pk")[: INBOX_COUNT_CAP + 1].count()
    return OpenCount(min(counted, INBOX_COUNT_CAP), counted > INBOX_COUNT_CAP)


def pause_cursor(pause: Pause) -> str:
    """A pause's place in the inbox order (newest first): its creation time in UTC to the
    microsecond, then its id; strings compare as the order does."""
    return f"{pause.created_at.astimezone(UTC):{CURSOR_TIME}}-{pause.pk}"


def _cursor_position(cursor: str) -> tuple[datetime, str] | None:
    stamp, _, pk = cursor.partition("-")
    try:
        created = datetime.strptime(stamp, CURSOR_TIME).replace(tzinfo=UTC)
    except ValueError:
        return None
    return (created, pk) if pk else None


def inbox_page(*, caller: Caller, before: str | None = None, after: str | None = None, size: int = 20) -> InboxPage:
    """A page of the open pauses the caller may decide, newest first: older than the card
    `before` names and newer than the one `after` names, when given (a live page asks for
    what arrived since its newest card; an unreadable cursor reads as none). Two queries
    whatever the history: the page (one row more, to know whether another follows) and
    the count (capped), both on the (tenant, state, age) index."""
    decidable = pauses_decidable(caller=caller).defer(*CARD_UNREAD)
    # Each bound's plain time comes first: it is what the index scan starts (or stops)
    # at; the OR alone would be a filter over every open pause on the wrong side.
    if (older := _cursor_position(before) if before else None) is not None:
        created, pk = older
        decidable = decidable.filter(created_at__lte=created).filter(
            Q(created_at__lt=created) | Q(created_at=created, pk__lt=pk)
        )
    if (newer := _cursor_position(after) if after else None) is not None:
        created, pk = newer
        decidable = decidable.filter(created_at__gte=created).filter(
            Q(created_at__gt=created) | Q(created_at=created, pk__gt=pk)
        )
    rows = list(decidable[: size + 1])
    pauses = rows[:size]
    total = pauses_decidable_count(caller=caller)
    return InboxPage(pauses, total, pause_cursor(pauses[-1]) if len(rows) > size else None)


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


def pause_payload_shown(pause: Pause, may_see_token: bool) -> dict[str, Any]:
    """A pause's payload as a reader sees it: a sign-in's address and one-time state only
    beside the token (tokens.SIGN_IN_KEYS: who holds them can complete the sign-in), unsealed."""
    payload = {key: value for key, value in (pause.payload or {}).items() if key != SIGN_IN_SEALED}
    return {**payload, **sign_in_unseal(pause.payload)} if may_see_token else payload


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


def task_detail(*, caller: Caller, run_id: str) -> Run:
    """One task with its visible pauses (`visible_pauses`, oldest first) and its steering
    history (`steering_history`)."""
    pauses = pauses_visible(caller=caller).order_by("created_at", "pk")
    steering = SteeringInstruction.objects.select_related("actor").order_by("id")
    run = (
        selectors.runs_visible(caller=caller)
        .filter(pk=run_id)
        .prefetch_related(
            Prefetch("pauses", queryset=pauses, to_attr="visible_pauses"),
            Prefetch("steering", queryset=steering, to_attr="steering_history"),
        )
        .first()
    )
    if run is None:
        raise NotFound("no such run")
    return run
