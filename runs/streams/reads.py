"""The durable log as a stream reads it (PROTOCOL §5): by sequence after the stream's cursor.

Sequences are allocated under the tenant row's lock and committed in that order, so a read
by `sequence > cursor` never skips a late commit, and a single cursor never sends an event
twice. A pushed event is shown by the same visibility rule on the inputs the push carries
(`push_shown`), so a stream may deliver it without a read."""

from typing import cast

from approvals.domain.selectors import token_visibility
from approvals.models import Pause
from runs.domain import events, selectors
from runs.domain.event_types import Envelope
from runs.domain.tokens import sign_in_open, sign_in_unseal, token_unseal
from runs.identity.callers import Caller
from runs.identity.visibility import Viewer
from runs.kernel.errors import InvalidRequest
from runs.models import Event

BATCH = 200
MAX_TYPES = 50
CURSOR_DIGITS = 18  # a stream's cursor (Last-Event-ID, ?after=): a sequence fits a bigint


def is_cursor(raw: str) -> bool:
    """A stream's cursor as a client writes it (Last-Event-ID, ?after=): ASCII digits, at
    most CURSOR_DIGITS of them (int() alone takes signs, spaces, underscores and other
    scripts' digits)."""
    return raw.isascii() and raw.isdigit() and len(raw) <= CURSOR_DIGITS


def starting_cursor(cursor: int | None, head: int) -> int:
    """Where a stream starts: after the client's cursor, or at the tenant's head without one.
    A cursor past the head (from a log reset since, or made up) starts at the head too: it
    would hear nothing until the log grew past it."""
    return head if cursor is None else min(cursor, head)


def event_types(value: str) -> frozenset[str] | None:
    """A stream's narrowing to named event types ("a,b"; SSE's X-Harbor-Event-Type, a
    websocket's ?types=), None for every type."""
    names = frozenset(part.strip() for part in value.split(",") if part.strip())
    if len(names) > MAX_TYPES or any(len(n) > 64 for n in names):
        raise InvalidRequest(f"name at most {MAX_TYPES} event types of up to 64 characters")
    return names or None


def read_after(
    *,
    caller: Caller,
    cursor: int,
    run_id: str | None = None,
    types: frozenset[str] | None = None,
    tenant_wide: bool = False,
) -> tuple[list[Envelope], int]:
    """The envelopes of the next visible events after `cursor`, and the new cursor. When the
    batch is not full, every event up to the head read first has been seen, so the cursor
    moves past invisible ones too. Tokens are re-checked here, at send time."""
    head = selectors.events_head(tenant_id=caller.tenant.pk)
    batch = selectors.events_after(
        caller=caller, after=cursor, run_id=run_id, types=types, tenant_wide=tenant_wide, limit=BATCH
    )
    may_see_token = token_visibility(caller=caller, pause_ids=[e.payload.get("_pause") for e in batch])
    envelopes = [
        events.envelope(e, tenant_slug=caller.tenant.slug, with_tokens=may_see_token(e.payload.get("_pause")))
        for e in batch
    ]
    new_cursor = batch[-1].sequence if batch else cursor
    if len(batch) < BATCH:
        new_cursor = max(new_cursor, head)
    return envelopes, new_cursor


def read_after_shared(
    *, tenant_id: int, tenant_slug: str, reads: list[tuple[Viewer, int, int, str | None, frozenset[str] | None]]
) -> list[list[Envelope]]:
    """`read_after` for many streams of one tenant, each reading the events after its cursor
    up to a head at most BATCH later (viewer, cursor, head, run or None, types or None): one
    read of the log, and of the pauses whose tokens it carries, then the visibility rule
    applied per stream on the rows read (`Viewer`, the rule the queries apply). A thousand
    sockets catching up on one commit cost two queries, not a few thousand. Each stream's
    cursor moves to its head."""
    low, high = min(cursor for _, cursor, _, _, _ in reads), max(head for _, _, head, _, _ in reads)
    assert all(head - cursor <= BATCH for _, cursor, head, _, _ in reads), "further behind: page with read_after"
    owned = selectors.events_between(tenant_id=tenant_id, after=low, upto=high)
    rows = [row for row, _ in owned]
    pause_ids = {row.payload["_pause"] for row in rows if row.payload.get("_token_keys")}
    pauses = {pause.pk: pause for pause in Pause.objects.filter(pk__in=pause_ids, tenant_id=tenant_id)}
    plain = {row.sequence: events.envelope(row, tenant_slug=tenant_slug, with_tokens=False) for row in rows}
    with_token: dict[int, Envelope] = {}

    def shown(row: Event, viewer: Viewer) -> Envelope:
        pause = pauses.get(row.payload.get("_pause"))
        if pause is None or not viewer.may_decide(
            pause_id=pause.pk, user=pause.identity_user, session=pause.identity_session, cause=pause.cause
        ):
            return plain[row.sequence]
        if row.sequence not in with_token:
            token = token_unseal(pause.token_sealed) if pause.token_sealed else None
            shown = events.capabilities(row.payload["_token_keys"], token, sign_in_unseal(pause.payload))
            payload = {**plain[row.sequence]["payload"], **shown}
            with_token[row.sequence] = {**plain[row.sequence], "payload": payload}
        return with_token[row.sequence]

    return [
        [
            shown(row, viewer)
            for row, owner_id in owned
            if cursor < row.sequence <= head
            and (run_id is None or row.run_id == run_id)
            and (types is None or row.type in types)
            and viewer.sees_run(owner_id=owner_id, run_id=row.run_id)
        ]
        for viewer, cursor, head, run_id, types in reads
    ]


def push_shown(
    item: dict, *, viewer: Viewer, run_id: str | None = None, types: frozenset[str] | None = None
) -> bool | None:
    """Whether a stream receives a pushed event (push._published) and, if it does, whether
    with its resume token: the visibility rule on the inputs the push carries (the run's
    owner, the pausing identity), no database read. None: the stream does not receive it."""
    envelope = item["envelope"]
    if (run_id is not None and envelope["run"] != run_id) or (types is not None and envelope["type"] not in types):
        return None
    if not viewer.sees_run(owner_id=item["owner"], run_id=envelope["run"]):
        return None
    pause = item.get("pause")
    return (
        pause is not None
        and bool(pause["keys"])
        and viewer.may_decide(pause_id=pause["id"], user=pause["user"], session=pause["session"], cause=pause["cause"])
    )


def pushed_envelope(item: dict, *, tenant_slug: str, with_token: bool) -> Envelope:
    """A pushed event's envelope as `read_after` would return it."""
    envelope = cast(Envelope, {**item["envelope"], "tenant": tenant_slug})
    pause = item.get("pause")
    if with_token and pause is not None:
        token = token_unseal(pause["sealed"]) if pause["sealed"] else None
        shown = events.capabilities(pause["keys"], token, sign_in_open(pause.get("sign_in")))
        envelope["payload"] = {**envelope["payload"], **shown}
    return envelope
