"""The hot path's written-out statements read and write what the ORM would."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from runs.domain import events
from runs.domain.audit import AuditImmutable
from runs.domain.event_types import TaskStarted
from runs.domain.rows import RUNS, TOOL_CALLS
from runs.models import Event, Run, RunStatus, ToolCall, ToolCallOutcome
from tests.conftest import requires_postgres


@pytest.fixture
def run(people):
    alice = people.caller("alice")
    return RUNS.insert(
        Run(tenant=alice.tenant, owner=alice.user, session="s", agent_id="deploy", goal="ship", checkpoint={"step": 0})
    )


def test_a_row_inserted_and_locked_reads_back_as_the_orm_reads_it(run):
    with transaction.atomic():
        locked = RUNS.lock(pk=run.pk)
    orm = Run.objects.get(pk=run.pk)
    assert locked is not None
    for field in Run._meta.concrete_fields:
        assert getattr(locked, field.attname) == getattr(orm, field.attname), field.name
    assert locked.created_at.tzinfo is not None  # datetimes come back aware, JSON as objects
    assert locked.checkpoint == {"step": 0} and locked.steering_pending is False
    assert locked.owner.username == "alice"  # the owner comes along with the row


def test_a_lock_by_a_foreign_tenant_finds_nothing(run, people):
    with transaction.atomic():
        assert RUNS.lock(pk=run.pk, tenant=people.globex) is None


def test_an_update_writes_the_named_fields_and_the_auto_now_ones(run):
    before = Run.objects.get(pk=run.pk).updated_at
    run.checkpoint, run.goal = {"step": 3, "history": [{"a": 1}]}, "not written"
    RUNS.update(run, ["checkpoint"])
    stored = Run.objects.get(pk=run.pk)
    assert stored.checkpoint == {"step": 3, "history": [{"a": 1}]}
    assert stored.goal == "ship" and stored.updated_at >= before


def test_a_claim_updates_and_returns_only_a_row_that_still_matches(run):
    with transaction.atomic():
        claimed = RUNS.update_returning("id = %s AND status = %s", [run.pk, RunStatus.PENDING], lease_owner="w1")
        again = RUNS.update_returning("id = %s AND lease_owner = %s", [run.pk, ""], lease_owner="w2")
    assert claimed is not None and claimed.lease_owner == "w1" and claimed.owner.username == "alice"
    assert again is None
    assert Run.objects.get(pk=run.pk).lease_owner == "w1"


def test_an_append_only_row_is_inserted_with_its_key_and_settled_once_only(run):
    call = TOOL_CALLS.insert(
        ToolCall(tenant_id=run.tenant_id, run=run, step=0, attempt=1, tool="t", worker="w", idempotency_key="k")
    )
    assert call.pk is not None and ToolCall.objects.get(pk=call.pk).outcome == ToolCallOutcome.RUNNING
    settle = {"outcome": ToolCallOutcome.COMPLETED, "finished_at": timezone.now() + timedelta(seconds=1)}
    assert TOOL_CALLS.update_where({"pk": call.pk, "outcome": ToolCallOutcome.RUNNING}, **settle) == 1
    assert TOOL_CALLS.update_where({"pk": call.pk, "outcome": ToolCallOutcome.RUNNING}, **settle) == 0
    with pytest.raises(AuditImmutable):
        TOOL_CALLS.update(call)


def test_a_numbered_insert_counts_after_the_rows_it_shares_its_columns_with(run):
    def attempt(step: int) -> ToolCall:
        with transaction.atomic():
            return TOOL_CALLS.insert(
                ToolCall(tenant_id=run.tenant_id, run=run, step=step, tool="t", worker="w", idempotency_key="k"),
                numbered=("attempt", ("run", "step")),
            )

    numbered = [attempt(0), attempt(0), attempt(1), attempt(0)]
    assert [call.attempt for call in numbered] == [1, 2, 1, 3]
    assert all(call.pk is not None and not call._state.adding for call in numbered)
    stored = ToolCall.objects.filter(run=run).order_by("step", "attempt").values_list("pk", "step", "attempt")
    assert list(stored) == sorted(((c.pk, c.step, c.attempt) for c in numbered), key=lambda row: row[1:])


def test_an_update_of_a_row_read_here_writes_only_what_changed(run):
    with transaction.atomic():
        locked = RUNS.lock(pk=run.pk)
        assert locked is not None
        elsewhere = [{"role": "operator", "content": "set elsewhere"}]
        Run.objects.filter(pk=run.pk).update(steering_pending=True, goal="set elsewhere", messages=elsewhere)
        locked.status = RunStatus.RUNNING
        locked.checkpoint["step"] = 5  # changed in place: still seen, and written
        RUNS.update(locked)
    stored = Run.objects.get(pk=run.pk)
    assert stored.status == RunStatus.RUNNING and stored.checkpoint == {"step": 5}
    # Left alone, JSON documents included (on PostgreSQL too, where jsonb reads back as objects).
    assert stored.steering_pending is True and stored.goal == "set elsewhere" and stored.messages == elsewhere


@requires_postgres
def test_postgresql_prepares_the_loops_statements_and_nothing_else(people, probe):
    """A generic plan suits the loop's fixed, selective statements; for the inbox's pages
    over a skewed history it can be a poor one, so those are never prepared."""
    from django.test import Client

    from tests.runs.test_query_counts import cycle

    cycle(people)
    client = Client()
    client.login(username="bob", password="bob-password")
    for _ in range(3):  # more than any automatic preparation threshold
        assert client.get("/inbox/").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [" ".join(statement.split()) for (statement,) in cursor.fetchall()]
    assert any("FOR NO KEY UPDATE" in statement for statement in prepared)  # the run lock
    # A decision reads its pause by the run (a few rows, whatever the history), alone or
    # beside the run's read: the loop's.
    inbox_reads = [
        statement
        for statement in prepared
        if statement.startswith("SELECT")
        and "approvals_pause" in statement
        and "FOR NO KEY UPDATE" not in statement
        and '"approvals_pause"."run_id" = ' not in statement
    ]
    assert not inbox_reads


@requires_postgres
@pytest.mark.django_db
def test_postgresql_reads_timestamps_with_psycopgs_own_loader_as_aware_utc():
    """Django's timestamptz loader parses each value in Python; psycopg's own gives the same
    datetimes (harbor_site.postgresql), whatever offset the server writes them with."""
    import datetime

    import psycopg
    from psycopg.pq import Format

    oid = psycopg.adapters.types["timestamptz"].oid
    with connection.cursor() as cursor:
        cursor.execute("SELECT '2020-01-01 10:00:00.123456+05'::timestamptz, NULL::timestamptz")
        read, missing = cursor.fetchone()
        loader = cursor.cursor.adapters.get_loader(oid, Format.TEXT)
    assert read == datetime.datetime(2020, 1, 1, 5, 0, 0, 123456, tzinfo=datetime.UTC)
    assert read.tzinfo is datetime.UTC and missing is None
    assert type(loader(oid, cursor.cursor)) is psycopg.adapters.get_loader(oid, Format.TEXT)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("locked_first", [True, False], ids=["after-a-lock", "alone"])
def test_a_guarded_write_that_writes_no_row_undoes_its_whole_transaction(people_tx, locked_first):
    """A transaction's last writes go with its events (runs.domain.events); a guarded one
    that finds its row settled already refuses, and nothing of the transaction lands, even
    where the writes would otherwise go as one statement of their own."""
    alice = people_tx.caller("alice")
    run = RUNS.insert(Run(tenant=alice.tenant, owner=alice.user, session="s", agent_id="deploy", goal="ship"))
    call = TOOL_CALLS.insert(
        ToolCall(tenant_id=run.tenant_id, run=run, step=0, attempt=1, tool="t", worker="w", idempotency_key="k")
    )
    settle = {"outcome": ToolCallOutcome.COMPLETED, "finished_at": timezone.now()}
    TOOL_CALLS.update_where({"pk": call.pk}, **settle)  # settled by someone else first
    with pytest.raises(LookupError, match="settled already"), events.atomic():
        held = RUNS.lock(pk=run.pk) if locked_first else run  # alone: the transaction sends nothing before its end
        assert held is not None
        held.goal = "changed"
        events.at_end(RUNS, held)
        events.emit(
            run=held, type=events.TASK_STARTED, payload=TaskStarted(TaskID=run.pk, Priority=0, ParentTaskID=None)
        )
        refused = LookupError("settled already")
        events.settle_at_end(
            TOOL_CALLS.settling({"pk": call.pk, "outcome": ToolCallOutcome.RUNNING}, refused, outcome="failed")
        )
    assert Run.objects.get(pk=run.pk).goal == "ship"
    assert not Event.objects.filter(run_id=run.pk).exists()
    assert ToolCall.objects.get(pk=call.pk).outcome == ToolCallOutcome.COMPLETED
