"""A notification channel receives each pause notice once, after the transaction that parked
the pause commits; a rolled-back park tells nothing; a failing channel is retried by the
outbox, and one that gives up leaves the message dead."""

from collections.abc import Iterator

import pytest
from django.db import transaction
from django.utils import timezone

import notifications
import outbox
from approvals.domain.services import pause_park
from approvals.models import Cause, Pause, Reason
from notifications import Notice, NoticeKind
from outbox.models import OutboxMessage, State
from runs.application import run_start
from runs.domain.transitions import move
from runs.models import Run, RunStatus
from runs.runtime.dispatch import drain

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


class RecordingChannel:
    """A channel of the tests: records each notice; the next `failures` attempts raise `error`."""

    name = "test-recorder"

    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self.attempts = 0
        self.failures = 0
        self.error: Exception = notifications.RetryableFailure("receiver down")

    def deliver(self, notice: Notice) -> None:
        self.attempts += 1
        if self.failures:
            self.failures -= 1
            raise self.error
        self.notices.append(notice)


@pytest.fixture
def channel() -> Iterator[RecordingChannel]:
    recorder = RecordingChannel()
    with notifications.isolated() as registry:
        registry.register(recorder)
        yield recorder


def make_due() -> None:
    OutboxMessage.objects.filter(state=State.PENDING).update(next_attempt_at=timezone.now())


def parked_gate(people) -> Pause:
    run, _ = run_start(caller=people.caller("alice"), query="deploy build 42 to staging", agent_id="deploy")
    drain()
    return Pause.objects.get(run=run)


def test_the_product_registers_no_channel_yet():
    assert notifications.registered() == []
    assert isinstance(RecordingChannel(), notifications.Channel)


def test_a_committed_park_is_told_once_on_each_channel(people_tx, channel):
    pause = parked_gate(people_tx)
    assert channel.notices == []  # nothing before a deliverer runs
    assert outbox.deliver_due() == 1
    [notice] = channel.notices
    assert notice == Notice(
        kind=NoticeKind.PAUSE_REQUESTED,
        tenant_id=pause.tenant_id,
        pause_id=pause.pk,
        run_id=pause.run_id,
        summary=notice.summary,
        link=f"/inbox/#pause-{pause.pk}",
    )
    assert notice.summary and "hrbp_" not in notice.summary  # plain words, never the token
    assert outbox.deliver_due() == 0 and len(channel.notices) == 1


def test_a_rolled_back_park_tells_nothing(people_tx, channel):
    run, _ = run_start(caller=people_tx.caller("alice"), query="count to 3", agent_id="countdown")
    with pytest.raises(Boom), transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        move(run, RunStatus.RUNNING)
        pause_park(run=run, cause=Cause.OPERATOR, reason=Reason.AWAIT_INPUT, payload={}, step=1)
        assert OutboxMessage.objects.filter(kind="notification").count() == 1  # owed, inside the transaction
        raise Boom()
    assert not OutboxMessage.objects.filter(kind="notification").exists()
    assert outbox.deliver_due() == 0 and channel.notices == []


def test_a_failing_channel_is_retried_under_the_same_key(people_tx, channel):
    channel.failures = 2
    parked_gate(people_tx)
    for attempt in (1, 2):
        assert outbox.deliver_due() == 0
        message = OutboxMessage.objects.get(kind="notification")
        assert (message.state, message.attempts) == (State.PENDING, attempt)
        assert "receiver down" in message.last_error
        make_due()
    assert outbox.deliver_due() == 1
    assert channel.attempts == 3 and len(channel.notices) == 1
    assert OutboxMessage.objects.get(kind="notification").state == State.DELIVERED


def test_a_channel_that_gives_up_leaves_the_message_dead_at_once(people_tx, channel):
    channel.failures, channel.error = 1, notifications.PermanentFailure("no such address")
    parked_gate(people_tx)
    assert outbox.deliver_due() == 0
    message = OutboxMessage.objects.get(kind="notification")
    assert (message.state, message.attempts) == (State.DEAD, 1)
    assert "test-recorder: no such address" in message.last_error and channel.notices == []
