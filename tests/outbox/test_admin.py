"""The outbox in the admin: listed with its filters, read-only, and a dead letter sent again
by the redeliver action."""

from datetime import timedelta

import pytest
from django.contrib.admin import helpers
from django.contrib.auth.models import Permission
from django.db import transaction
from django.utils import timezone

import outbox
from outbox.models import OutboxMessage, State
from tests.factories import SuperuserFactory, UserFactory
from tests.outbox.conftest import KIND

pytestmark = pytest.mark.django_db(transaction=True)
CHANGELIST = "/admin/outbox/outboxmessage/"


@pytest.fixture
def dead(recorder, settings) -> OutboxMessage:
    settings.HARBOR_OUTBOX_MAX_ATTEMPTS = 2
    recorder.failures = 2
    with transaction.atomic():
        outbox.enqueue(KIND, "k-dead", {"to": "bob", "about": "pause 1"})
        outbox.enqueue(KIND, "k-later", {})
    OutboxMessage.objects.filter(key="k-later").update(next_attempt_at=timezone.now() + timedelta(hours=1))
    for _ in range(2):
        outbox.deliver_due()
        OutboxMessage.objects.filter(key="k-dead").update(next_attempt_at=timezone.now())
    message = OutboxMessage.objects.get(key="k-dead")
    assert message.state == State.DEAD
    return message


@pytest.fixture
def admin_client(client):
    client.force_login(SuperuserFactory.create(username="root"))
    return client


def test_the_list_filters_by_state_kind_attempts_next_attempt_and_error(dead, admin_client):
    for query, shown in [
        ("state__exact=dead", ["k-dead"]),
        ("state__exact=pending", ["k-later"]),
        (f"kind={KIND}", ["k-dead", "k-later"]),
        ("attempts=2", ["k-dead"]),
        ("has_error=yes", ["k-dead"]),
        ("has_error=no", ["k-later"]),
        ("next_attempt_at__gte=2000-01-01%2000:00:00%2B00:00", ["k-dead", "k-later"]),
    ]:
        page = admin_client.get(f"{CHANGELIST}?{query}")
        assert page.status_code == 200, query
        body = page.content.decode()
        assert [key for key in ("k-dead", "k-later") if key in body] == shown, query
    assert "ConnectionError: receiver down" in admin_client.get(CHANGELIST).content.decode()


def test_a_message_is_read_only(dead, admin_client):
    page = admin_client.get(f"{CHANGELIST}{dead.pk}/change/").content.decode()
    assert "&quot;about&quot;: &quot;pause 1&quot;" in page and 'name="payload"' not in page
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403
    assert admin_client.post(f"{CHANGELIST}{dead.pk}/delete/", {"post": "yes"}).status_code == 403
    admin_client.post(f"{CHANGELIST}{dead.pk}/change/", {"payload": "{}", "state": "pending"})
    assert OutboxMessage.objects.get(pk=dead.pk).state == State.DEAD


def test_redeliver_puts_a_dead_message_back_and_it_is_delivered(dead, admin_client, recorder, nudged):
    later = OutboxMessage.objects.get(key="k-later")
    answer = admin_client.post(
        CHANGELIST, {"action": "redeliver_dead", helpers.ACTION_CHECKBOX_NAME: [dead.pk, later.pk]}, follow=True
    )
    body = answer.content.decode()
    assert "1 message(s) put back to pending" in body and "1 message(s) were not dead" in body
    message = OutboxMessage.objects.get(pk=dead.pk)
    assert (message.state, message.attempts) == (State.PENDING, 0)
    assert message.last_error == "ConnectionError: receiver down"  # what went wrong stays readable
    assert nudged == [1]  # a deliverer is nudged once the redelivery commits
    assert outbox.deliver_due() == 1
    message.refresh_from_db()
    assert (message.state, message.attempts) == (State.DELIVERED, 1)
    assert recorder.delivered == ["k-dead"]
    assert OutboxMessage.objects.get(pk=later.pk).state == State.PENDING  # untouched, still not due


def test_only_people_who_may_change_messages_can_redeliver(dead, client):
    viewer = UserFactory.create(username="viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_outboxmessage"))
    client.force_login(viewer)
    assert "redeliver_dead" not in client.get(CHANGELIST).content.decode()
    client.post(CHANGELIST, {"action": "redeliver_dead", helpers.ACTION_CHECKBOX_NAME: [dead.pk]})
    assert OutboxMessage.objects.get(pk=dead.pk).state == State.DEAD
