"""Two deliverers draining at once on PostgreSQL, on real threads and connections: each
message is delivered exactly once (claims skip rows the other holds)."""

import threading
import time

import pytest
from django.db import connection, transaction

import outbox
from outbox.models import OutboxMessage, State
from tests.conftest import requires_postgres
from tests.outbox.conftest import KIND

pytestmark = [requires_postgres, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MESSAGES = 120


def test_two_deliverers_racing_deliver_each_message_exactly_once(recorder):
    with transaction.atomic():
        for index in range(MESSAGES):
            outbox.enqueue(KIND, f"k{index}", {"n": index})
    slow = recorder.__call__

    def handler(delivery: outbox.Delivery) -> None:
        slow(delivery)
        time.sleep(0.002)  # an effect takes a while: the other deliverer claims meanwhile

    outbox.register(KIND, handler)
    start = threading.Barrier(2)
    counts: dict[str, int] = {}

    def deliverer(name: str) -> None:
        try:
            start.wait()
            counts[name] = 0
            while done := outbox.deliver_due(limit=7):
                counts[name] += done
        finally:
            connection.close()

    threads = [threading.Thread(target=deliverer, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(recorder.delivered) == sorted(f"k{index}" for index in range(MESSAGES))  # no key twice
    assert len(recorder.attempts) == MESSAGES
    assert counts["one"] + counts["two"] == MESSAGES and min(counts.values()) > 0  # both took a share
    assert set(OutboxMessage.objects.values_list("state", "attempts")) == {(State.DELIVERED, 1)}
