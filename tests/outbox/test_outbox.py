"""The outbox's promises: written with its transaction (savepoints included), delivered
after commit, retried with backoff, dead after the last attempt, and one message per key."""

import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

import outbox
from outbox.models import OutboxMessage, State
from tests.outbox.conftest import KIND

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


def make_due() -> None:
    """As if the time to the next attempt (a backoff, a lease) had passed."""
    OutboxMessage.objects.filter(state=State.PENDING).update(next_attempt_at=timezone.now())


def test_a_message_is_delivered_after_its_transaction_commits(recorder, nudged):
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {"to": "bob"})
        assert nudged == []  # not before the commit
    assert nudged == [1]
    assert outbox.deliver_due() == 1
    assert [(d.key, d.payload, d.attempt) for d in recorder.attempts] == [("k1", {"to": "bob"}, 1)]
    message = OutboxMessage.objects.get()
    assert (message.state, message.attempts, message.last_error) == (State.DELIVERED, 1, "")
    assert message.delivered_at is not None and len(message.pk) == 26
    assert outbox.deliver_due() == 0 and len(recorder.attempts) == 1  # delivered once


def test_a_rolled_back_transaction_sends_nothing(recorder, nudged):
    with pytest.raises(Boom), transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
        raise Boom()
    assert nudged == [] and not OutboxMessage.objects.exists()
    assert outbox.deliver_due() == 0 and recorder.attempts == []


def test_a_savepoint_rolled_back_sends_nothing_while_the_outer_commit_is_delivered(recorder, nudged):
    with transaction.atomic():
        outbox.enqueue(KIND, "outer", {})
        with pytest.raises(Boom), transaction.atomic():
            outbox.enqueue(KIND, "inner", {})
            raise Boom()
    assert nudged == [1]  # the savepoint's nudge went with it
    assert list(OutboxMessage.objects.values_list("key", flat=True)) == ["outer"]
    assert outbox.deliver_due() == 1 and recorder.delivered == ["outer"]


def test_enqueue_outside_a_transaction_is_refused(recorder):
    with pytest.raises(AssertionError, match="in the transaction"):
        outbox.enqueue(KIND, "k1", {})
    assert not OutboxMessage.objects.exists()


def test_an_unknown_kind_or_a_bad_key_fails_the_change_now(recorder):
    with pytest.raises(LookupError, match="no outbox handler"), transaction.atomic():
        outbox.enqueue("test.nobody", "k1", {})
    with pytest.raises(ValueError), transaction.atomic():
        outbox.enqueue(KIND, "", {})
    with pytest.raises(ValueError), transaction.atomic():
        outbox.enqueue(KIND, "x" * 201, {})
    assert not OutboxMessage.objects.exists()


def test_enqueue_is_idempotent_on_kind_and_key(recorder, nudged):
    outbox.register("test.other", recorder)
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {"n": 1})
        outbox.enqueue(KIND, "k1", {"n": 2})  # the first stands
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {"n": 3})
        outbox.enqueue("test.other", "k1", {"n": 4})  # another kind: another message
    assert sorted(OutboxMessage.objects.values_list("kind", "payload")) == [
        ("test.other", {"n": 4}),
        (KIND, {"n": 1}),
    ]
    assert outbox.deliver_due() == 2
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {"n": 5})  # delivered already: nothing new is owed
    assert outbox.deliver_due() == 0
    assert sorted((d.kind, d.payload["n"]) for d in recorder.attempts) == [("test.other", 4), (KIND, 1)]


def test_a_failed_attempt_is_retried_with_doubling_backoff_under_the_same_key(recorder, settings):
    settings.HARBOR_OUTBOX_BACKOFF_SECONDS = 10
    settings.HARBOR_OUTBOX_BACKOFF_MAX_SECONDS = 15
    recorder.failures = 3
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})

    waits = []
    for attempt in (1, 2, 3):
        before = timezone.now()
        assert outbox.deliver_due() == 0
        message = OutboxMessage.objects.get()
        assert (message.state, message.attempts) == (State.PENDING, attempt)
        assert message.last_error == "ConnectionError: receiver down"
        waits.append(message.next_attempt_at - before)
        assert outbox.deliver_due() == 0 and len(recorder.attempts) == attempt  # not due yet: no attempt
        make_due()
    assert [round(wait.total_seconds()) for wait in waits] == [10, 15, 15]  # 10, 20 capped at 15, ...

    assert outbox.deliver_due() == 1
    message = OutboxMessage.objects.get()
    assert (message.state, message.attempts) == (State.DELIVERED, 4)
    assert [(d.key, d.attempt) for d in recorder.attempts] == [("k1", 1), ("k1", 2), ("k1", 3), ("k1", 4)]
    assert len({d.id for d in recorder.attempts}) == 1


def test_a_message_goes_dead_after_the_last_attempt(recorder, settings):
    settings.HARBOR_OUTBOX_MAX_ATTEMPTS = 3
    recorder.failures = 10
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
    for _ in range(5):
        outbox.deliver_due()
        make_due()
    message = OutboxMessage.objects.get()
    assert (message.state, message.attempts, len(recorder.attempts)) == (State.DEAD, 3, 3)
    assert message.last_error == "ConnectionError: receiver down"


def test_a_permanent_failure_goes_dead_at_once(recorder):
    recorder.failures, recorder.error = 1, outbox.PermanentFailure("the receiver refuses it for good")
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
    assert outbox.deliver_due() == 0
    message = OutboxMessage.objects.get()
    assert (message.state, message.attempts) == (State.DEAD, 1)
    assert message.last_error == "PermanentFailure: the receiver refuses it for good"


def test_a_long_error_is_kept_bounded(recorder):
    recorder.failures, recorder.error = 1, RuntimeError("x" * 10_000)
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
    outbox.deliver_due()
    assert len(OutboxMessage.objects.get().last_error) == 2000


class DelivererDied(BaseException):
    """The process delivering stops mid-attempt (killed): no outcome is recorded."""


def test_a_message_whose_deliverer_died_comes_back_when_its_lease_ends(recorder, settings):
    settings.HARBOR_OUTBOX_LEASE_SECONDS = 60
    recorder.failures, recorder.error = 1, DelivererDied()
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
    with pytest.raises(DelivererDied):
        outbox.deliver_due()
    message = OutboxMessage.objects.get()
    assert message.state == State.PENDING and message.attempts == 1
    assert message.next_attempt_at > timezone.now() + timedelta(seconds=50)  # leased: no one else takes it
    assert outbox.deliver_due() == 0
    make_due()  # the lease ran out
    assert outbox.deliver_due() == 1
    assert [d.attempt for d in recorder.attempts] == [1, 2]


def test_a_deliverer_that_always_dies_leaves_the_message_dead(recorder, settings):
    settings.HARBOR_OUTBOX_MAX_ATTEMPTS = 2
    recorder.failures, recorder.error = 2, DelivererDied()
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
    for _ in range(2):
        with pytest.raises(DelivererDied):
            outbox.deliver_due()
        make_due()
    assert outbox.deliver_due() == 0 and len(recorder.attempts) == 2
    message = OutboxMessage.objects.get()
    assert message.state == State.DEAD and message.last_error == "no outcome recorded after 2 attempts"


def test_what_a_slow_batch_has_not_begun_is_given_back_before_its_lease_runs_out(recorder, settings):
    settings.HARBOR_OUTBOX_LEASE_SECONDS = 0.2
    slow = recorder.__call__
    leased: list[bool] = []  # whether each attempt began under a lease still running

    def handler(delivery: outbox.Delivery) -> None:
        leased.append(OutboxMessage.objects.get(pk=delivery.id).next_attempt_at > timezone.now())
        slow(delivery)
        time.sleep(0.15)  # past half the lease: the rest of the batch is claimed afresh

    outbox.register(KIND, handler)
    with transaction.atomic():
        for key in ("a", "b", "c"):
            outbox.enqueue(KIND, key, {})
    assert outbox.deliver_due() == 3
    assert recorder.delivered == ["a", "b", "c"] and leased == [True, True, True]
    assert set(OutboxMessage.objects.values_list("state", "attempts")) == {(State.DELIVERED, 1)}


def test_due_messages_go_oldest_due_first_and_limit_bounds_a_drain(recorder):
    with transaction.atomic():
        for key in ("a", "b", "c"):
            outbox.enqueue(KIND, key, {})
    OutboxMessage.objects.filter(key="c").update(next_attempt_at=timezone.now() - timedelta(minutes=1))
    assert outbox.deliver_due(limit=2) == 2
    assert recorder.delivered == ["c", "a"]
    assert outbox.deliver_due() == 1 and recorder.delivered[-1] == "b"


def test_delivery_inside_a_transaction_is_refused(recorder):
    with pytest.raises(transaction.TransactionManagementError), transaction.atomic():
        outbox.deliver_due()
