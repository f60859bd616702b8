"""Bulk history for the benchmark's read figures: runs and their pauses written with
`bulk_create`, the shape a tenant has after a long life (1 % of pauses open, the rest
decided, spread over a year among ten members). No events: the reads measured here are
pause.list and the inbox, which never read the log."""

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from approvals.domain.tokens import token_mint, token_seal
from approvals.models import Cause, Decision, Pause, PauseState, Reason
from runs.identity.callers import Caller
from runs.identity.permissions import membership_grant
from runs.models import Role, Run, RunStatus

BATCH = 5000
OPEN_EVERY = 100  # one open pause in a hundred: 1k open at 100k, 10k at 1M
MEMBERS = 10


@contextmanager
def _explicit_timestamps() -> Iterator[None]:
    """Let bulk_create keep the `created_at` it is given (history spread over a year)."""
    fields = [Run._meta.get_field("created_at"), Pause._meta.get_field("created_at")]
    for field in fields:
        field.auto_now_add = False
    try:
        yield
    finally:
        for field in fields:
            field.auto_now_add = True


def _owners(caller: Caller) -> list[User]:
    """The caller and nine more members of its tenant, who share the history."""
    users = get_user_model()
    owners = [caller.user]
    for index in range(1, MEMBERS):
        user, _ = users.objects.get_or_create(username=f"bench-member-{index}")
        membership_grant(tenant=caller.tenant, user=user, role=Role.MEMBER)
        owners.append(user)
    return owners


def seed_history(*, caller: Caller, count: int, decider: User, progress: Callable[[int], object] | None = None) -> None:
    """Write `count` runs, each with one pause; every hundredth pause is open."""
    owners = _owners(caller)
    sealed = token_seal(token_mint())  # one sealed token serves every row: only the digest is unique
    now = timezone.now()
    span = timedelta(days=365)
    with _explicit_timestamps():
        for start in range(0, count, BATCH):
            runs, pauses = [], []
            for index in range(start, min(start + BATCH, count)):
                created = now - span + span * (index / count)
                owner = owners[index % len(owners)]
                is_open = index % OPEN_EVERY == OPEN_EVERY - 1
                run = Run(
                    tenant=caller.tenant,
                    owner=owner,
                    session="bench-seed",
                    agent_id="bench_gate",
                    goal="launch",
                    status=RunStatus.PAUSED if is_open else RunStatus.COMPLETE,
                    created_at=created,
                    finished_at=None if is_open else created + timedelta(minutes=2),
                )
                runs.append(run)
                decided = (
                    {}
                    if is_open
                    else {
                        "state": PauseState.RESUMED,
                        "decision": Decision.APPROVE,
                        "decided_by": decider,
                        "decided_session": "bench-seed",
                        "decided_at": created + timedelta(minutes=1),
                        "on_behalf_of": f"{caller.tenant.slug}/{owner.username}/bench-seed",
                    }
                )
                pauses.append(
                    Pause(
                        tenant=caller.tenant,
                        run=run,
                        cause=Cause.HITL_APPROVAL,
                        reason=Reason.APPROVAL_REQUIRED,
                        token_digest=secrets.token_hex(32),
                        token_sealed=sealed,
                        identity_user=owner.username,
                        identity_session="bench-seed",
                        tool="launch",
                        step=1,
                        payload={"Tool": "launch", "Args": {"target": "moon"}},
                        created_at=created,
                        **decided,
                    )
                )
            with transaction.atomic():
                Run.objects.bulk_create(runs)
                Pause.objects.bulk_create(pauses)
            if progress is not None:
                progress(min(start + BATCH, count))
