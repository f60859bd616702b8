"""What a /v1 request costs around the service it calls, pinned so a regression fails CI
(timing lives in `bin/bench --http`): statements for identity and the throttle, and the
thread hand-offs of Django's middleware stack under ASGI."""

import asyncio
import contextlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from asgiref import sync
from django.core.signals import request_finished
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Pause
from harbor_site.asgi_handler import OneThreadASGIHandler
from harbor_site.request_threads import RequestThreads
from runs.application import run_start, steering_submit
from runs.identity.callers import User, caller_resolve
from runs.kernel.errors import AuthRejected
from runs.models import Tenant
from runs.runtime.dispatch import drain

from .conftest import mint


def _statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]


def _gated_runs(people, count: int) -> list[str]:
    alice = people.caller("alice")
    ids = [run_start(caller=alice, query="deploy build 7 to staging", agent_id="deploy")[0].pk for _ in range(count)]
    drain()
    assert Pause.objects.filter(run_id__in=ids, state="paused").count() == count
    return ids


def test_an_approve_costs_two_statements_beyond_its_service(api, people):
    """Identity is one read (membership, tenant and user together, which also answers the
    caller's role for the service) and the refusal throttle one more."""
    first, by_http, by_service = _gated_runs(people, 3)
    api.control("approve", first, {})  # warm what a long-lived process has cached
    with CaptureQueriesContext(connection) as http:
        assert api.control("approve", by_http, {}).status_code == 200
    alice = people.caller("alice")
    with CaptureQueriesContext(connection) as service:
        steering_submit(caller=alice, run_id=by_service, method="approve", payload={})
    assert len(_statements(http)) - len(_statements(service)) == 2, _statements(http)


def test_a_request_that_is_not_a_decision_reads_identity_once(api, people):
    (run,) = _gated_runs(people, 1)
    with CaptureQueriesContext(connection) as http:
        assert api.control("user_message", run, {"message": "hello"}).status_code == 200
    alice = people.caller("alice")
    with CaptureQueriesContext(connection) as service:
        steering_submit(caller=alice, run_id=run, method="user_message", payload={"message": "hi"})
    assert len(_statements(http)) - len(_statements(service)) == 1


def test_the_membership_read_serves_the_callers_role(people):
    with CaptureQueriesContext(connection) as queries:
        bob = people.caller("bob")
        assert bob.role == "approver" and not bob.is_admin
    assert len(_statements(queries)) == 1
    # The one statement's rows come back as the ORM would build them.
    assert bob.tenant == Tenant.objects.get(slug="acme") and bob.tenant.name == Tenant.objects.get(slug="acme").name
    assert bob.user == User.objects.get(username="bob") and bob.user.is_active is True
    assert bob.user.date_joined == User.objects.get(username="bob").date_joined  # converted, aware


def test_a_refused_identity_still_says_why(people):
    with pytest.raises(AuthRejected, match="not a member"):
        caller_resolve(tenant="globex", user="alice", session="s1")
    with pytest.raises(AuthRejected, match="unknown tenant"):
        caller_resolve(tenant="nowhere", user="alice", session="s1")
    User.objects.filter(username="mallory").update(is_active=False)
    with pytest.raises(AuthRejected, match="unknown user"):
        caller_resolve(tenant="acme", user="mallory", session="s1")


@pytest.mark.django_db(transaction=True)
def test_an_asgi_request_crosses_between_loop_and_thread_at_most_three_times(people_tx, monkeypatch):
    """The request_started signal, the whole stack with the view, and the response's close:
    not one hop per middleware step, view middleware, view and render."""
    hops = []
    original = sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        hops.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    (run,) = _gated_runs(people_tx, 1)
    body = json.dumps({"identity": {"run": run}, "payload": {}})

    async def approve() -> httpx.Response:
        transport = httpx.ASGITransport(app=OneThreadASGIHandler())  # type: ignore[arg-type]  # stubs differ on Mapping
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            headers = {"Authorization": f"Bearer {mint('alice')}", "Content-Type": "application/json"}
            return await client.post("/v1/control/approve", content=body, headers=headers)

    response = sync.async_to_sync(approve)()
    assert response.status_code == 200, response.text
    assert len(hops) <= 3, hops


def test_sequential_requests_run_on_one_thread_and_keep_its_connection(people_tx):
    """A request borrows a thread of a fixed set (harbor_site.request_threads), the one used
    last first: nothing is started per request, and on SQLite the thread's connection is
    still open from the request before."""
    threads = RequestThreads(4)
    handler = OneThreadASGIHandler()

    async def app(scope, receive, send):
        async with threads.borrowed():
            await handler(scope, receive, send)

    seen = []

    def record(**kwargs):  # after Django's own request_finished receiver (close_old_connections)
        seen.append((threading.current_thread().name, connection.connection))

    async def list_twice() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            headers = {"Authorization": f"Bearer {mint('alice')}", "Content-Type": "application/json"}
            return [
                (await client.post("/v1/tasks/list", json={"identity": {}}, headers=headers)).status_code
                for _ in range(2)
            ]

    request_finished.connect(record)
    try:
        assert sync.async_to_sync(list_twice)() == [200, 200]
    finally:
        request_finished.disconnect(record)
    (first_thread, first_connection), (second_thread, second_connection) = seen
    assert first_thread == second_thread and first_thread.startswith("harbor-request-")
    if connection.vendor == "sqlite":  # PostgreSQL's come from the pool, handed back at the end
        assert first_connection is not None and second_connection is first_connection
        first_connection.close()


def test_a_request_beyond_the_set_waits_for_a_thread():
    threads = RequestThreads(2)

    async def scenario() -> tuple[int, set[str]]:
        names: list[str] = []
        release = asyncio.Event()

        async def request() -> None:
            async with threads.borrowed():
                names.append(await sync.sync_to_async(lambda: threading.current_thread().name)())
                await release.wait()

        tasks = [asyncio.create_task(request()) for _ in range(3)]
        await asyncio.sleep(0.2)
        running = len(names)
        release.set()
        await asyncio.gather(*tasks)
        return running, set(names)

    with ThreadPoolExecutor(max_workers=1) as runner:  # a loop of its own, whatever this thread holds
        running, names = runner.submit(asyncio.run, scenario()).result()
    assert running == 2  # the third waited for a thread
    assert len(names) == 2


def test_a_thread_left_busy_by_a_cancelled_request_is_not_lent_until_idle():
    threads = RequestThreads(2)
    stuck = threading.Event()

    async def scenario() -> tuple[str, str, int]:
        started = asyncio.Event()
        names: list[str] = []

        def blocked() -> None:
            names.append(threading.current_thread().name)
            stuck.wait(10)

        async def abandoned() -> None:
            async with threads.borrowed():
                call = asyncio.ensure_future(sync.sync_to_async(blocked)())
                await asyncio.sleep(0.1)
                started.set()
                await call

        async def next_request() -> str:
            async with threads.borrowed():
                return await sync.sync_to_async(lambda: threading.current_thread().name)()

        first = asyncio.create_task(abandoned())
        await started.wait()
        first.cancel()  # the client went away; its call still runs on the thread
        with contextlib.suppress(asyncio.CancelledError):
            await first
        second = await asyncio.wait_for(next_request(), 2)
        stuck.set()
        await asyncio.sleep(0.2)
        third = await asyncio.wait_for(next_request(), 2)  # the freed thread is lent again
        return names[0], second, len({names[0], second, third})

    with ThreadPoolExecutor(max_workers=1) as runner:
        abandoned_on, second_on, distinct = runner.submit(asyncio.run, scenario()).result()
    assert second_on != abandoned_on
    assert distinct == 2
