"""Start a run: checked, written once per idempotency key, taken by a worker after commit."""

from django.db import IntegrityError

from runs.domain import events
from runs.domain.event_types import TaskSpawned
from runs.domain.instruction_payloads import priority_check
from runs.domain.payload import MAX_STRING
from runs.identity.callers import Caller
from runs.identity.scopes import can_view_run
from runs.kernel.errors import InvalidRequest, NotFound, PayloadInvalid, ScopeMismatch
from runs.models import CancelPolicy, Run
from runs.runtime.registry import agent_exists
from runs.runtime.wake import wake_on_commit

DEFAULT_PRIORITY = 0


def run_start(
    *,
    caller: Caller,
    query: str,
    agent_id: str = "deploy",
    priority: int = DEFAULT_PRIORITY,
    idempotency_key: str | None = None,
    parent_run: str | None = None,
    cancel_policy: str = CancelPolicy.CASCADE,
    run_id: str | None = None,
) -> tuple[Run, bool]:
    """Start a run for the caller. An idempotency key already used by the same
    (tenant, user, session) returns that run with reused=True; a worker takes its first step
    once it commits. `run_id`: the id the new run gets (a request chooses it once; answered again after a lost
    connection, it finds the run it made: selectors.run_started_by)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidRequest("query must be a non-empty string")
    if len(query) > MAX_STRING:
        raise PayloadInvalid(f"query is over {MAX_STRING} characters")
    if not isinstance(agent_id, str) or not agent_exists(agent_id):
        raise InvalidRequest(f"unknown agent_id {agent_id!r}")
    priority_check(priority)
    if priority > DEFAULT_PRIORITY and not caller.is_admin:
        raise ScopeMismatch(f"a priority above {DEFAULT_PRIORITY} needs the admin scope, as prioritize does")
    if cancel_policy not in CancelPolicy.values:
        raise InvalidRequest("cancel_policy must be 'cascade' or 'isolate'")
    if idempotency_key is not None and (not isinstance(idempotency_key, str) or not 0 < len(idempotency_key) <= 200):
        raise InvalidRequest("idempotency_key must be a string of 1 to 200 characters")

    identity = {"tenant": caller.tenant, "owner": caller.user, "session": caller.session}
    if idempotency_key is not None:
        existing = Run.objects.filter(**identity, idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing, True
    if parent_run is not None and not isinstance(parent_run, str):
        raise NotFound("parent_run is unknown or terminal")

    try:
        with events.atomic():
            parent = None
            if parent_run is not None:
                # Locked, so a cancel cascading from the parent cannot miss this child.
                parent = Run.objects.locked().filter(pk=parent_run, tenant=caller.tenant).first()
                if parent is None or not can_view_run(caller, parent) or parent.is_terminal:
                    raise NotFound("parent_run is unknown or terminal")
            run = Run(
                **identity,
                **({"id": run_id} if run_id is not None else {}),
                agent_id=agent_id,
                goal=query,
                priority=priority,
                parent=parent,
                cancel_policy=cancel_policy,
                idempotency_key=idempotency_key,
                checkpoint={"query": query, "step": 0, "history": []},
            )
            run.save(force_insert=True)
            events.emit(
                run=run,
                type=events.TASK_SPAWNED,
                payload=TaskSpawned(TaskID=run.pk, Priority=priority, ParentTaskID=parent.pk if parent else None),
            )
            wake_on_commit()
    except IntegrityError:
        # The same key raced in from another request of this identity: theirs won.
        existing = Run.objects.filter(**identity, idempotency_key=idempotency_key).first()
        if idempotency_key is None or existing is None:
            raise
        return existing, True
    return run, False
