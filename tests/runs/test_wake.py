"""Wake-ups: one sets one embedded worker thread draining; an in-process one waits until
the response that raised it is sent."""

import asyncio
import json
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from harbor_site.asgi_handler import OneThreadASGIHandler
from runs.application import run_start
from runs.runtime import dispatch
from runs.runtime.dispatch import drain
from runs.runtime.wake import register, wake_now
from tests.runs.api.conftest import TRUSTED_PEM, mint


def test_one_wake_up_sets_one_worker_thread_draining(monkeypatch):
    drained: list[str] = []
    first = threading.Event()

    def drain() -> int:
        drained.append(threading.current_thread().name)
        first.set()
        return 0

    monkeypatch.setattr(dispatch, "drain", drain)
    pool = dispatch._LocalPool(4, interval=60)  # no periodic look within the test
    pool.start()
    try:
        pool.wake()
        assert first.wait(10)
        time.sleep(0.3)  # a second thread woken by the same wake-up would have drained by now
        assert len(drained) == 1, drained
        pool.wake()
        pool.wake()
        deadline = time.monotonic() + 10
        while len(drained) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(drained) == 3
    finally:
        pool.stop()
    assert not any(thread.name.startswith("harbor-worker-") for thread in pool._threads if thread.is_alive())


@pytest.mark.django_db(transaction=True)
def test_a_wake_up_raised_by_a_request_goes_out_once_its_answer_is_sent(people_tx, settings):
    """The work it starts (a thread of this process, a worker on the same cores) would
    compete with the answer still being sent."""
    order: list[str] = []
    register("test-executor", lambda: order.append("woken"))
    settings.HARBOR_EXECUTOR = "test-executor"
    settings.HARBOR_JWT_PUBLIC_KEYS = TRUSTED_PEM
    alice = people_tx.caller("alice")
    with override_settings(HARBOR_EXECUTOR="manual"):
        run, _ = run_start(caller=alice, query="deploy build 7 to staging", agent_id="deploy")
        drain()
    body = json.dumps({"identity": {"run": run.pk}, "payload": {}}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/control/approve",
        "raw_path": b"/v1/control/approve",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", f"Bearer {mint('alice')}".encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # the client stays until the answer comes
        raise AssertionError("unreachable")

    async def send(message: Mapping[str, Any]) -> None:
        order.append(message["type"])
        if message["type"] == "http.response.start":
            order.append(f"status {message['status']}")

    async_to_sync(OneThreadASGIHandler())(scope, receive, send)
    assert order[:3] == ["http.response.start", "status 200", "http.response.body"], order
    assert order[3:] == ["woken"], order
    # Outside a request (a worker, the sweep) a wake-up goes out at once.
    wake_now()
    assert order[-1] == "woken" and order.count("woken") == 2
