"""One batch of the sockets' reads: re-checks of the people listening (still signed in, still
members), and the durable log after each socket's cursor, read once per tenant for the
sockets near its head."""

from dataclasses import dataclass

from django.contrib.auth.models import User

from runs.domain import selectors
from runs.domain.event_types import Envelope
from runs.identity.callers import Caller
from runs.identity.sessions import PAGES_SESSION
from runs.identity.visibility import Viewer, viewers_of
from runs.models import Membership
from runs.streams import reads as streams
from runs.web.sockets import access


@dataclass(frozen=True, eq=False)
class Read:
    """One socket's read: who listens, in which tenant and login session, after which cursor."""

    user_id: int
    tenant_id: int
    session_key: str
    run_id: str | None
    cursor: int
    types: frozenset[str] | None = None  # the socket's narrowing (?types=), None for all
    log: bool = True  # False: a periodic re-check, which reads the tenant's head, not the log
    # The socket's Viewer while its last re-check is current: a catch-up then reads only the
    # log, under the rule a push is delivered by, and only as far as `upto` (the last push it
    # received: nothing a push would not have delivered). None re-checks the person first.
    viewer: Viewer | None = None
    upto: int = 0


# (close code, envelopes, new cursor, viewer, the tenant's head)
ReadResult = tuple[int | None, list[Envelope], int, Viewer | None, int]


def read_many(reads: list[Read]) -> list[ReadResult]:
    """For each read: a close code once the person may no longer listen, else the next
    envelopes after its cursor, the new cursor, and the person's Viewer (as of now when
    re-checked: role, delegations). The re-checks of a batch take a few queries in all, a
    catch-up under a current Viewer none, and the log is read only for sockets behind their
    tenant's head, once per tenant."""
    heads = selectors.events_heads(tenant_ids={read.tenant_id for read in reads})

    def head_of(read: Read) -> int:  # as far as this read may read
        head = heads.get(read.tenant_id, (0, ""))[0]
        return head if read.viewer is None else min(head, read.upto)

    checked = [
        read
        for read in reads
        if read.viewer is None
        or read.tenant_id not in heads
        or (read.log and head_of(read) - read.cursor > streams.BATCH)
    ]
    signed_here, callers = recheck_listeners(checked)
    closed = set(checked) - set(callers)  # may no longer listen
    viewers = {read: read.viewer for read in reads if read.viewer is not None}
    viewers.update(zip(callers, viewers_of(list(callers.values())), strict=True))
    behind = [read for read in reads if read not in closed and read.log and read.cursor < head_of(read)]
    logs = _logs_after(behind, callers, viewers, {read: head_of(read) for read in behind}, heads)
    results: list[ReadResult] = []
    for read in reads:
        if read in closed:
            close = access.CLOSE_FORBIDDEN if read.session_key in signed_here else access.CLOSE_UNAUTHENTICATED
            results.append((close, [], read.cursor, None, 0))
        else:
            envelopes, cursor = logs.get(read, ([], read.cursor))
            results.append((None, envelopes, cursor, viewers[read], heads.get(read.tenant_id, (0, ""))[0]))
    return results


def recheck_listeners(reads: list[Read]) -> tuple[set[str], dict[Read, Caller]]:
    """The login sessions that still sign their person in, and a Caller for each read whose
    person may still listen (signed in, an active member of the tenant)."""
    if not reads:
        return set(), {}
    signed = access.signed_in_users({read.session_key for read in reads})
    memberships = {
        (m.user_id, m.tenant_id): m
        for m in Membership.objects.select_related("tenant", "user").filter(
            user_id__in={read.user_id for read in reads}, tenant_id__in={read.tenant_id for read in reads}
        )
    }
    users = {m.user_id: m.user for m in memberships.values()}
    missing = {read.user_id for read in reads} - set(users)
    if missing:  # no membership left: the user is still needed to tell 4401 from 4403
        users.update((user.pk, user) for user in User.objects.filter(pk__in=missing))
    sessions_of = {(read.session_key, read.user_id) for read in reads}  # a hash per session, not per socket
    signed_here = {
        key for key, user_id in sessions_of if user_id in users and access.still_signed_in(signed[key], users[user_id])
    }
    callers: dict[Read, Caller] = {}
    for read in reads:
        membership = memberships.get((read.user_id, read.tenant_id))
        if read.session_key in signed_here and membership is not None and membership.user.is_active:
            caller = Caller(tenant=membership.tenant, user=membership.user, session=PAGES_SESSION)
            caller.__dict__["role"] = membership.role  # Caller.role, as it would read it
            callers[read] = caller
    return signed_here, callers


def _logs_after(
    behind: list[Read],
    callers: dict[Read, Caller],
    viewers: dict[Read, Viewer],
    upto: dict[Read, int],
    heads: dict[int, tuple[int, str]],
) -> dict[Read, tuple[list[Envelope], int]]:
    """The log after each cursor: the sockets of a tenant a page or less behind its head
    share one read (a commit that every socket must catch up on costs two queries, not two
    per socket); a socket further behind (one that reconnected after a while, re-checked)
    pages alone."""
    logs: dict[Read, tuple[list[Envelope], int]] = {}
    near: dict[int, list[Read]] = {}
    for read in behind:
        if upto[read] - read.cursor <= streams.BATCH:
            near.setdefault(read.tenant_id, []).append(read)
        else:
            logs[read] = streams.read_after(
                caller=callers[read], cursor=read.cursor, run_id=read.run_id, types=read.types
            )
    for tenant_id, reads in near.items():
        shared = streams.read_after_shared(
            tenant_id=tenant_id,
            tenant_slug=heads[tenant_id][1],
            reads=[(viewers[read], read.cursor, upto[read], read.run_id, read.types) for read in reads],
        )
        logs.update({read: (envelopes, upto[read]) for read, envelopes in zip(reads, shared, strict=True)})
    return logs
