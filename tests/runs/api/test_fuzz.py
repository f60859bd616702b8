"""Property: whatever JSON (or near-JSON) arrives at a /v1/ body route — nested past any
parser's limit, numbers no column holds, NaN and Infinity, lone surrogates and NUL, huge
strings, wrong types anywhere — the answer is a coded JSON error or a success, never a 5xx
and never HTML (PROTOCOL §7). Schemathesis (test_openapi.py) covers what the schema
describes; this covers what it does not."""

import json
import os
from typing import Any

import hypothesis
import pytest
from django.test import Client
from hypothesis import strategies as st

from runs.domain.payload import MAX_REQUEST_BYTES
from runs.kernel.errors import HTTP_STATUS
from runs.runtime.dispatch import drain

from .conftest import mint

METHODS = ["cancel", "pause", "resume", "approve", "reject", "redirect", "inject_context", "user_message", "prioritize"]
ROUTES = [
    "/v1/control/start",
    *(f"/v1/control/{m}" for m in METHODS),
    "/v1/pause/list",
    "/v1/tasks/list",
    "/v1/tasks/get",
    "/v1/control/unknown",
]
FUZZ_SCALE = int(os.environ.get("HARBOR_FUZZ_SCALE", "5" if os.environ.get("DATABASE_URL") else "1"))
EXAMPLES = 150 * FUZZ_SCALE

# --- Strategies -----------------------------------------------------------------------------------

texts = st.one_of(
    st.text(max_size=20),  # any code point, lone surrogates and NUL included
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "\ud800",
            "\udfff",
            "count to 3",
            "deploy",
            "countdown",
            "admin",
            "owner_user",
            "paused",
            "any",
            "approval_required",
            "hrbp_guess",
            "2026-11-29T10:00:00Z",
        ]
    ),
    st.integers(4090, 70_000).map(lambda n: "x" * n),  # over the string and body bounds
)
numbers = st.one_of(
    st.integers(-1000, 1000),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([0, 1, -1, 2**53, 2**63, -(2**63) - 1, 10**6 + 1]),
    st.floats(allow_nan=True, allow_infinity=True),  # sent as NaN / Infinity literals
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(texts, inner, max_size=6), max_leaves=20
)


@st.composite
def deep(draw) -> str:
    """Nesting past the bounds, up to past the parser's recursion limit (still under 64 KiB)."""
    depth = draw(st.integers(5, 30_000))
    opening, closing = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    return opening * depth + "1" + closing * depth


def bodies(run: str):
    identity = st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "run": st.one_of(st.just(run), texts, values),
                "scope": texts,
                "tenant": texts,
                "user": texts,
                "session": texts,
            },
        ),
        values,
    )
    shaped = st.fixed_dictionaries(
        {},
        optional={
            "identity": identity,
            "payload": values,
            "event_id": values,
            "query": values,
            "agent_id": values,
            "priority": values,
            "idempotency_key": values,
            "parent_run": values,
            "cancel_policy": values,
            "page": values,
            "page_size": values,
            "filter": values,
        },
    ).map(lambda body: json.dumps(body))  # NaN/Infinity written as literals, surrogates escaped
    anything = values.map(json.dumps)
    spliced = st.tuples(shaped, deep()).map(
        lambda pair: pair[0][:-1] + (", " if pair[0] != "{}" else "") + '"payload": ' + pair[1] + "}"
    )
    broken = st.one_of(st.binary(max_size=64), shaped.map(lambda text: text[: len(text) // 2]))
    return st.one_of(shaped, shaped, anything, spliced, deep(), broken)


# --- The property ---------------------------------------------------------------------------------


@pytest.fixture
def targets(api):
    """A queued run and a parked one, so some requests reach the services with real ids."""
    queued = api.start()
    parked = api.start("deploy build 3 to staging", "deploy")
    drain()
    return [queued, parked]


def test_no_body_ever_gets_a_server_error(targets):
    client = Client()
    tokens = {"alice": mint("alice"), "ada": mint("ada", scopes=["admin"]), "gina": mint("gina")}
    seen: dict[int, int] = {}

    @hypothesis.given(
        route=st.sampled_from(ROUTES),
        user=st.sampled_from([*tokens, None]),
        run=st.sampled_from(targets),
        data=st.data(),
    )
    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    def check(route, user, run, data):
        raw = data.draw(bodies(run))
        raw = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
        hypothesis.assume(len(raw) <= 2 * MAX_REQUEST_BYTES)
        extra: dict[str, Any] = {"HTTP_AUTHORIZATION": f"Bearer {tokens[user]}"} if user else {}
        response = client.post(route, data=raw, content_type="application/json", **extra)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        assert response["Content-Type"].startswith("application/json"), response.content[:200]
        body = response.json()
        assert response.status_code < 500, (route, raw[:300], body)
        if response.status_code >= 400:
            assert set(body) == {"code", "message"}, body
            assert HTTP_STATUS[body["code"]] == response.status_code, body

    check()
    print(f"fuzz: {sum(seen.values())} requests, statuses {sorted(seen.items())}")
    assert len(seen) >= 4  # the generator reaches past the first refusal
