"""A decision while the channel layer (Redis) is down or hung lands and answers 200 at
once: the live push after commit never raises into the request nor holds it."""

import socket
import threading
import time

import pytest
from channels.layers import channel_layers
from django.db import connection

from approvals.models import Pause
from runs.domain import push as live_push
from runs.runtime.dispatch import drain
from tests.live import free_port

from .conftest import Api

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["refused", "hung"])
def broken_layer(request, settings, transport):
    """Redis that refuses connections, or one that accepts them and never answers, carrying
    the live pushes over pub/sub or through the channel layer."""
    listener = None
    port = free_port()
    settings.HARBOR_LIVE_REDIS_URL = f"redis://127.0.0.1:{port}/0" if transport == "pubsub" else None
    if request.param == "hung":
        listener = socket.socket()
        listener.bind(("127.0.0.1", port))
        listener.listen(64)  # never accepted: connects succeed, replies never come
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{port}/0"]},
        }
    }
    channel_layers.backends.clear()
    live_push._push_paused_until = 0.0
    yield
    channel_layers.backends.clear()
    live_push._push_paused_until = 0.0
    if listener is not None:
        listener.close()


@pytest.fixture(params=["pubsub", "channel layer"])
def transport(request):
    return request.param


def test_an_approve_lands_and_answers_200_quickly_while_the_layer_is_down(people_tx, broken_layer):
    api = Api()
    run = api.start("deploy build 42 to staging", "deploy")
    drain()
    token = api.ok("/v1/pause/list", {"identity": {}, "filter": {"run_ids": [run]}})["snapshots"][0]["token"]
    live_push._push_paused_until = 0.0  # the approve's own push meets the broken layer
    answered: dict[str, float] = {}

    def approve():
        started = time.monotonic()
        try:
            answered["status"] = api.control("approve", run, {"token": token}).status_code
            answered["seconds"] = time.monotonic() - started
        finally:
            connection.close()  # this thread's own

    worker = threading.Thread(target=approve, daemon=True)
    worker.start()
    worker.join(10)
    assert answered.get("status") == 200, answered or "the approve hung on the channel layer"
    assert answered["seconds"] < 3
    assert Pause.objects.get(run_id=run).decision == "approve"
