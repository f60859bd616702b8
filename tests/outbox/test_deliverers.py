"""Who drains after a commit: a thread of the process on the embedded default (the outbox's
own executor, or the embedded pool once it takes the drains), a Celery task in production."""

import time
from io import StringIO

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import transaction

import outbox
from outbox import embedded, tasks
from outbox.models import OutboxMessage, State
from tests.outbox.conftest import KIND

pytestmark = pytest.mark.django_db(transaction=True)


def wait_until_delivered(count: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if OutboxMessage.objects.filter(state=State.DELIVERED).count() == count:
            return True
        time.sleep(0.02)
    return False


def test_on_the_embedded_default_a_commit_has_a_thread_of_the_process_deliver(recorder, settings):
    settings.HARBOR_EXECUTOR = "thread"
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
    assert wait_until_delivered(1)
    assert recorder.delivered == ["k1"]


def test_the_embedded_pool_can_take_the_drains_and_nudges_coalesce(recorder, settings):
    settings.HARBOR_EXECUTOR = "thread"
    jobs: list = []
    outbox.use_embedded_runner(jobs.append)
    try:
        with transaction.atomic():
            outbox.enqueue(KIND, "k1", {})
        with transaction.atomic():
            outbox.enqueue(KIND, "k2", {})
        assert jobs == [embedded.drain]  # one drain waiting covers both commits
        jobs.pop()()
        assert sorted(recorder.delivered) == ["k1", "k2"]
        with transaction.atomic():
            outbox.enqueue(KIND, "k3", {})
        assert jobs == [embedded.drain]  # a commit after the drain began has one of its own
        jobs.pop()()
        assert sorted(recorder.delivered) == ["k1", "k2", "k3"]
    finally:
        outbox.use_embedded_runner(None)


def test_a_failed_drain_is_logged_and_the_next_nudge_tries_again(recorder, settings, caplog):
    settings.HARBOR_EXECUTOR = "thread"
    recorder.failures = 1
    settings.HARBOR_OUTBOX_BACKOFF_SECONDS = 0
    jobs: list = []
    outbox.use_embedded_runner(jobs.append)
    try:
        with transaction.atomic():
            outbox.enqueue(KIND, "k1", {})
        jobs.pop()()
        assert OutboxMessage.objects.get().state == State.PENDING and recorder.delivered == []
        assert jobs == []  # nothing retries by itself
        with transaction.atomic():
            outbox.enqueue(KIND, "k2", {})
        jobs.pop()()
        assert sorted(recorder.delivered) == ["k1", "k2"]
    finally:
        outbox.use_embedded_runner(None)


def test_in_production_a_commit_sends_one_drain_task_and_the_beat_drains_too(recorder, settings, monkeypatch):
    settings.HARBOR_EXECUTOR = "celery"
    sent: list[dict] = []
    monkeypatch.setattr(tasks.deliver, "apply_async", lambda **options: sent.append(options))
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
    assert sent == [{"retry": False}]
    assert tasks.deliver() == 1 and recorder.delivered == ["k1"]  # what the worker runs
    beat = django_settings.CELERY_BEAT_SCHEDULE["outbox"]
    assert beat["task"] == tasks.deliver.name == "outbox.tasks.deliver"


def test_a_broker_that_is_down_does_not_fail_the_commit(recorder, settings, monkeypatch):
    settings.HARBOR_EXECUTOR = "celery"

    def down(**options):
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.deliver, "apply_async", down)
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
    assert OutboxMessage.objects.get().state == State.PENDING  # the beat's drain delivers it


def test_the_command_delivers_what_is_due(recorder):
    with transaction.atomic():
        outbox.enqueue(KIND, "k1", {})
    out = StringIO()
    call_command("outbox_deliver", stdout=out)
    assert out.getvalue().strip() == "delivered 1 message(s)" and recorder.delivered == ["k1"]
