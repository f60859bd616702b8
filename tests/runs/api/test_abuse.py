"""Hostile requests: each test performs an attack that used to answer 500, an HTML page,
a spooled body, a lock-out or an oracle, and shows the coded refusal it gets now."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.test import Client

from approvals.models import DecisionRefusal, Pause
from runs.domain.payload import MAX_REQUEST_BYTES
from runs.domain.tokens import token_unseal
from runs.models import SteeringInstruction
from runs.protocol.middleware import BodyLimit, client_address, trusted_networks
from runs.runtime.dispatch import drain
from tests.factories import DecisionRefusalFactory, SuperuserFactory

from .conftest import mint

LIST_ROUTES = ["/v1/pause/list", "/v1/tasks/list"]
BODY_ROUTES = [
    "/v1/control/start",
    *(
        f"/v1/control/{m}"
        for m in (
            "cancel",
            "pause",
            "resume",
            "approve",
            "reject",
            "redirect",
            "inject_context",
            "user_message",
            "prioritize",
        )
    ),
    *LIST_ROUTES,
    "/v1/tasks/get",
]


def _coded(response, status: int, code: str) -> None:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    body = response.json()
    assert (response.status_code, body["code"]) == (status, code), body
    assert set(body) == {"code", "message"}


# --- 1. No 500s, ever (PROTOCOL §7) -------------------------------------------------------------


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_json_nested_past_the_parsers_limit_is_payload_invalid(api, path):
    deep = '{"identity": {}, "payload": ' + "[" * 30000 + "]" * 30000 + "}"
    assert len(deep) < MAX_REQUEST_BYTES
    _coded(api.post(path, raw=deep), 422, "payload_invalid")


@pytest.mark.parametrize("path", LIST_ROUTES)
@pytest.mark.parametrize("page", [10**6 + 1, 10**15, 2**53 - 1])
def test_a_huge_page_number_is_invalid_not_a_database_overflow(api, path, page):
    _coded(api.post(path, {"page": page}), 400, "invalid_request")


@pytest.mark.parametrize("path", LIST_ROUTES)
def test_the_last_allowed_page_is_simply_empty(api, path):
    body = api.ok(path, {"page": 10**6, "page_size": 200})
    assert body["page"] == 10**6 and body.get("snapshots", body.get("tasks")) == []


@pytest.mark.parametrize(
    "number, status, code",
    [
        ("NaN", 400, "invalid_request"),
        ("Infinity", 400, "invalid_request"),
        ("-Infinity", 400, "invalid_request"),
        ("1e400", 422, "payload_invalid"),
        ("-1e400", 422, "payload_invalid"),
        ("1" + "0" * 30, 422, "payload_invalid"),
        ("9" * 5000, 400, "invalid_request"),
    ],
)
def test_numbers_no_column_holds_are_refused_not_stored(api, number, status, code):
    run = api.start()
    raw = '{"identity": {"run": "%s"}, "payload": {"x": %s}}' % (run, number)
    _coded(api.post("/v1/control/inject_context", raw=raw), status, code)
    _coded(api.post("/v1/tasks/list", raw='{"page": %s}' % number), status, code)
    assert SteeringInstruction.objects.filter(run_id=run).count() == 0


def test_finite_floats_and_safe_integers_are_still_accepted(api):
    run = api.start()
    payload = {"ratio": 0.25, "big": 2**53 - 1, "small": -(2**53 - 1), "tiny": 1e-300}
    assert api.control("inject_context", run, payload).status_code == 200


def test_an_error_message_quoting_a_lone_surrogate_still_renders(api):
    raw = '{"\\ud800": "%s"}' % ("x" * 5000)
    _coded(api.post("/v1/tasks/list", raw=raw), 422, "payload_invalid")


@pytest.mark.parametrize("method", ["get", "post", "put", "delete", "options"])
def test_v1_without_its_slash_is_a_json_404_not_a_redirect(api, method):
    _coded(getattr(api.client, method)("/v1", HTTP_AUTHORIZATION=f"Bearer {mint('alice')}"), 404, "not_found")


@pytest.mark.parametrize("path", ["/v1/tasks/list", "/v1/nope", "/v1/openapi.json"])
def test_a_foreign_host_header_on_v1_is_a_json_400(api, path):
    response = api.client.post(
        path,
        data="{}",
        content_type="application/json",
        HTTP_HOST="evil.example",
        HTTP_AUTHORIZATION=f"Bearer {mint('alice')}",
    )
    _coded(response, 400, "invalid_request")
    events = api.client.get("/v1/events", HTTP_HOST="evil.example:8000", HTTP_ACCEPT="text/event-stream")
    _coded(events, 400, "invalid_request")


@pytest.mark.parametrize(
    "path", ["/v1/events", "/v1/tools/oauth/callback", "/v1/openapi.json", "/v1/docs", "/v1/tasks/list"]
)
def test_a_query_string_past_djangos_field_limit_is_a_json_400(api, settings, path):
    query = "&".join(["a=1"] * (settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    response = api.client.get(f"{path}?{query}", HTTP_AUTHORIZATION=f"Bearer {mint('alice')}")
    _coded(response, 400, "invalid_request")


def test_a_stream_that_cannot_open_answers_with_a_json_content_type(api):
    _coded(api.client.get("/v1/events"), 401, "identity_required")


def test_the_oauth_callback_answers_other_methods_with_json_not_a_csrf_page(people):
    response = Client(enforce_csrf_checks=True).post("/v1/tools/oauth/callback?state=a&code=b")
    _coded(response, 405, "invalid_request")
    assert response["Allow"] == "GET, HEAD"


@pytest.mark.parametrize(
    "accept", ["", "*/*", "application/json", "application/json, text/plain", "application/json, text/html;q=0"]
)
def test_the_oauth_callback_answers_a_program_in_json_and_a_browser_with_a_page(people, accept):
    """Nothing under /v1/ answers a program with an HTML error page (PROTOCOL §7); a person's
    browser, which asks for HTML, reads one."""
    response = Client().get("/v1/tools/oauth/callback?state=x", HTTP_ACCEPT=accept)
    assert response["Content-Type"].startswith("application/json") and response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    page = Client().get("/v1/tools/oauth/callback?state=x", HTTP_ACCEPT="text/html,application/xhtml+xml,*/*;q=0.8")
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    assert "<code>invalid_request</code>" in page.content.decode()


def test_a_foreign_host_header_elsewhere_keeps_djangos_page(people):
    response = Client().get("/login/", HTTP_HOST="evil.example")
    assert response.status_code == 400 and not response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("context", ["[" * 50000, '{"a": ' * 5000 + "1" + "}" * 5000, '{"x": NaN}', '{"x": 1e400}'])
def test_the_console_refuses_hostile_injected_context_with_a_plain_form_error(api, client, context):
    run = api.start(user="olivia")
    assert client.login(username="olivia", password="olivia-password")
    page = client.post(f"/console/runs/{run}/steer/inject_context/", {"context": context}, follow=True)
    assert page.status_code == 200
    html = page.content.decode()
    if context == '{"x": NaN}':  # not JSON: sent as a note, as any other text
        assert "Context sent" in html
    else:
        assert "Not accepted" in html and "Context sent" not in html
        assert not SteeringInstruction.objects.filter(run_id=run).exists()


def test_an_approver_cannot_smuggle_deep_json_into_edited_arguments(api, client):
    run = api.start("deploy build 7 to staging", "deploy")
    drain()
    pause = Pause.objects.get(run_id=run)
    assert client.login(username="bob", password="bob-password")
    arg = next(iter(pause.payload["Args"]))
    page = client.post(
        f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve", f"arg-{arg}": "[" * 50000}, follow=True
    )
    assert page.status_code == 200 and "Not accepted" in page.content.decode()
    pause.refresh_from_db()
    assert pause.is_open


# --- 3. Large bodies are refused before they are read, and before authentication ----------------


def test_an_oversized_content_length_is_413_before_the_body_or_the_token_is_read(api, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("authentication ran for an oversized body")

    monkeypatch.setattr("runs.protocol.auth.BearerAuthentication.authenticate", never)
    # The body is tiny: reading the declared 50 MB would fail, so a 413 proves it was not read.
    response = api.client.post(
        "/v1/control/start",
        data=b"{}",
        content_type="application/json",
        CONTENT_LENGTH=str(50 * 1024 * 1024),
        HTTP_AUTHORIZATION="Bearer x.y.z",
    )
    _coded(response, 413, "request_too_large")


def test_a_malformed_content_length_is_invalid(api):
    response = api.client.post("/v1/tasks/list", data=b"{}", content_type="application/json", CONTENT_LENGTH="-1")
    _coded(response, 400, "invalid_request")


class _Downstream:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send):
        message = await receive()
        self.bodies.append(message["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _asgi(app, headers, chunks, path="/v1/control/start"):
    """Drive an ASGI app with a body sent in `chunks` (endless if a generator)."""
    sent, reads = [], {"count": 0}
    chunks = iter(chunks)

    async def receive():
        reads["count"] += 1
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    # A loop of its own on a thread of its own, whatever loop the suite has running.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, app(scope, receive, send)).result()
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, body, reads["count"]


def _endless():
    while True:
        yield b"x" * 16384


def test_asgi_refuses_on_content_length_without_reading_the_body():
    downstream = _Downstream()
    status, body, reads = _asgi(BodyLimit(downstream), [(b"content-length", b"104857600")], _endless())
    assert (status, json.loads(body)["code"], reads, downstream.bodies) == (413, "request_too_large", 0, [])


def test_asgi_bounds_a_chunked_body_without_content_length():
    downstream = _Downstream()
    status, body, reads = _asgi(BodyLimit(downstream), [(b"transfer-encoding", b"chunked")], _endless())
    assert (status, json.loads(body)["code"], downstream.bodies) == (413, "request_too_large", [])
    assert reads <= MAX_REQUEST_BYTES // 16384 + 1  # stopped reading just past the limit


def test_asgi_passes_a_chunked_body_within_the_limit_whole():
    downstream = _Downstream()
    status, body, _ = _asgi(BodyLimit(downstream), [], [b'{"a": ', b'"b"}'])
    assert (status, downstream.bodies) == (200, [b'{"a": "b"}'])
    status, _, reads = _asgi(BodyLimit(downstream), [(b"content-length", b"104857600")], _endless(), path="/inbox/")
    assert (status, reads) == (200, 1)  # outside /v1/ untouched: Django's own limits apply


def test_the_asgi_application_is_wrapped():
    from harbor_site import asgi

    assert isinstance(asgi._router.application_mapping["http"], BodyLimit)


# --- 4. Refusal throttle: per identity first, per address a coarse ceiling ---------------------


PROXY = "10.0.0.5"  # a load balancer we run
CLIENT = "203.0.113.7"  # one office NAT, shared by everybody in it


def _refusals(address: str, user: str, count: int, tenant: str = "acme") -> None:
    DecisionRefusalFactory.create_batch(count, actor_tenant=tenant, actor_user=user, address=address)


def _parked(api, user="alice") -> str:
    run = api.start("deploy build 42 to staging", "deploy", user=user)
    drain()
    return run


@pytest.fixture
def behind_proxy(settings):
    settings.HARBOR_TRUSTED_PROXIES = ["10.0.0.0/8"]
    settings.HARBOR_REFUSALS_PER_IDENTITY = 3
    settings.HARBOR_REFUSALS_PER_ADDRESS = 9
    return {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": f"{CLIENT}, 10.0.0.9"}


def _approve(api, run, user, extra, token=None):
    body = {"identity": {"run": run}, "payload": {"token": token} if token else {}}
    return api.client.post(
        "/v1/control/approve",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {mint(user)}",
        **extra,
    )


def test_one_persons_refusals_never_lock_out_another_behind_the_same_address(api, behind_proxy):
    run = _parked(api)
    gina_run = _parked(api, user="gina")
    for n in range(6):  # gina guesses tokens on her own run until she is held back
        response = _approve(api, gina_run, "gina", behind_proxy, token=f"hrbp_guess{n}")
        assert response.status_code == (404 if n < 3 else 429)
    (address,) = set(DecisionRefusal.objects.values_list("address", flat=True))
    assert address == CLIENT  # her office's address, not the proxy's
    _refusals(address, "gina", 40, tenant="globex")  # and many more through other ways in (the console)
    assert _approve(api, run, "bob", behind_proxy).status_code == 200  # bob, same office: unaffected


def test_the_address_ceiling_still_holds_against_many_identities(api, behind_proxy):
    run = _parked(api)
    for user in ("mallory", "eve", "trent"):
        _refusals(CLIENT, user, 3)
    _coded(_approve(api, run, "bob", behind_proxy), 429, "rate_limited")
    # ...from that address only: bob elsewhere decides.
    assert _approve(api, run, "bob", {"REMOTE_ADDR": "198.51.100.1"}).status_code == 200


def test_refusals_are_recorded_at_the_client_address_resolved_through_trusted_proxies(api, behind_proxy):
    run = _parked(api)
    _approve(api, run, "alice", behind_proxy, token="hrbp_wrong")
    # From an untrusted peer the header is the client's own word, and ignored.
    _approve(
        api, run, "alice", {"REMOTE_ADDR": "198.51.100.1", "HTTP_X_FORWARDED_FOR": "192.0.2.66"}, token="hrbp_wrong"
    )
    assert list(DecisionRefusal.objects.order_by("created_at", "id").values_list("address", flat=True)) == [
        CLIENT,
        "198.51.100.1",
    ]


@pytest.mark.parametrize(
    "peer, header, expected",
    [
        ("203.0.113.7", "192.0.2.1", "203.0.113.7"),  # not from a proxy: header ignored
        ("10.0.0.5", "", "10.0.0.5"),  # a proxy that added nothing
        ("10.0.0.5", "203.0.113.7", "203.0.113.7"),
        ("10.0.0.5", "192.0.2.1, 203.0.113.7", "203.0.113.7"),  # the client's own prefix is not believed
        ("10.0.0.5", "192.0.2.1, 203.0.113.7, 10.1.1.1", "203.0.113.7"),  # through two of our proxies
        ("10.0.0.5", "203.0.113.7, not-an-ip", "10.0.0.5"),  # garbage from the proxy side: stop there
        ("10.0.0.5", "10.2.2.2", "10.2.2.2"),  # only proxies: the farthest one
        ("::ffff:10.0.0.5", "2001:db8::1", "::ffff:10.0.0.5"),  # v4-mapped peers are not our networks
        ("fd00::1", "2001:db8::1", "2001:db8::1"),
    ],
)
def test_client_address_trusts_the_header_only_as_far_as_our_proxies_wrote_it(peer, header, expected):
    trusted = trusted_networks(("10.0.0.0/8", "fd00::/8"))
    assert client_address(peer, header, trusted) == expected


def test_the_address_ceiling_query_has_an_index(db):
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, DecisionRefusal._meta.db_table)
    assert any(c["index"] and c["columns"] == ["address", "created_at"] for c in constraints.values())


# --- 5. The admin never filters on hidden token fields -------------------------------------------


@pytest.fixture
def admin_client(api):
    run = _parked(api)
    SuperuserFactory.create(username="root")  # password: root-password
    client = Client()
    login = client.post("/admin/login/", {"username": "root", "password": "root-password", "next": "/admin/"})
    assert login.status_code == 302 and login["Location"] == "/admin/"
    return client, Pause.objects.get(run_id=run)


def test_the_admin_refuses_lookups_on_hidden_token_fields(admin_client):
    client, pause = admin_client
    token = token_unseal(pause.token_sealed)
    probes = [
        f"/admin/approvals/pause/?token_digest={pause.token_digest}",
        "/admin/approvals/pause/?token_digest=0000",
        f"/admin/approvals/pause/?token_sealed__startswith={pause.token_sealed[:4]}",
        "/admin/approvals/pause/?token_sealed__startswith=zzzz",
        f"/admin/approvals/pause/?token_digest__in={pause.token_digest},x",
        f"/admin/approvals/decisionrefusal/?pause__token_digest={pause.token_digest}",
        f"/admin/runs/run/?pauses__token_sealed__startswith={pause.token_sealed[:4]}",
    ]
    for probe in probes:
        response = client.get(probe)
        # The same answer whether the guess matches or not: no oracle.
        assert response.status_code == 400, probe
        assert pause.pk not in response.content.decode() and token not in response.content.decode()
    listing = client.get("/admin/approvals/pause/?state__exact=paused")
    assert listing.status_code == 200 and pause.pk in listing.content.decode()
