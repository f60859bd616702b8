"""The OpenAPI description (PROTOCOL §2), the browsable docs without a CDN, and a bounded
schemathesis run over every operation: no 5xx, and no response that contradicts the schema."""

import os
import re

import hypothesis
import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from django.test import Client
from schemathesis.generation import GenerationMode

from .conftest import mint

# Per operation and generation mode: bounded on the embedded default so the suite stays fast,
# wider in the PostgreSQL pass (HARBOR_FUZZ_SCALE overrides the multiplier).
FUZZ_SCALE = int(os.environ.get("HARBOR_FUZZ_SCALE", "5" if os.environ.get("DATABASE_URL") else "1"))
EXAMPLES = 20 * FUZZ_SCALE
# What runs.domain.payload says when a value passes a bound.
BOUNDS = ("nests deeper", "the limit is", "non-string key", "out of range", "integer beyond", "not a JSON value")


def test_the_openapi_document_describes_every_route(db):
    response = Client().get("/v1/openapi.json")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    doc = response.json()
    assert doc["openapi"].startswith("3.") and doc["info"]["version"] == "0.1.0"
    methods = [
        "cancel",
        "pause",
        "resume",
        "approve",
        "reject",
        "redirect",
        "inject_context",
        "user_message",
        "prioritize",
    ]
    expected = {
        "/v1/control/start",
        *(f"/v1/control/{m}" for m in methods),
        "/v1/pause/list",
        "/v1/tasks/list",
        "/v1/tasks/get",
        "/v1/events",
        "/v1/tools/oauth/callback",
    }
    assert set(doc["paths"]) == expected
    assert doc["components"]["securitySchemes"]["HarborBearer"]["scheme"] == "bearer"
    redirect = doc["components"]["schemas"]["RedirectPayload"]
    assert redirect["required"] == ["goal"]


@pytest.mark.parametrize("path", ["/v1/docs", "/v1/redoc"])
def test_the_docs_pages_answer_other_methods_with_json(db, path):
    response = Client(enforce_csrf_checks=True).post(path)
    assert response.status_code == 405 and response["Content-Type"] == "application/json"
    assert response.json()["code"] == "invalid_request" and response["Allow"] == "GET, HEAD"


@pytest.mark.parametrize("path", ["/v1/docs", "/v1/redoc"])
def test_the_docs_pages_serve_their_assets_locally(db, path):
    page = Client().get(path)
    assert page.status_code == 200
    html = page.content.decode()
    script = re.search(r'<script src="([^"]*\?script=[^"]*)"', html)  # Swagger's init script (no inline script)
    if script:
        html += Client().get(script.group(1).replace("&amp;", "&")).content.decode()
    assert "/v1/openapi.json" in html and "drf_spectacular_sidecar" in html
    assert "cdn." not in html and "unpkg" not in html


def test_schemathesis_finds_no_server_error_and_no_schema_violation(people_tx):
    app = get_wsgi_application()
    schema = schemathesis.openapi.from_wsgi("/v1/openapi.json", app)
    schema.config.generation.update(allow_x00=False)  # NUL is refused by design (400), as documented
    # PROTOCOL §3's payload bounds (depth, sizes, safe numbers) are not expressible in the
    # schema, so schema-valid data past them is 422 by design; the loop below checks that
    # every such 422 names a bound.
    acceptance = schema.config.checks.positive_data_acceptance
    acceptance.expected_statuses = [*acceptance.expected_statuses, "422"]
    headers = {"Authorization": f"Bearer {mint('alice')}"}
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]  # an Err raises, as it should
    # An endless stream, and a page whose query needs a code or an error: both tested live.
    operations = [op for op in operations if op.path not in ("/v1/events", "/v1/tools/oauth/callback")]
    assert len(operations) == 13
    calls = {"count": 0}
    statuses: dict[int, int] = {}

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis.settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(hypothesis.HealthCheck),
                phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
            )
            def check(case):
                identity = case.body.get("identity") if isinstance(case.body, dict) else None
                if mode == GenerationMode.POSITIVE and isinstance(identity, dict):
                    # A body identity that contradicts the token is a 401 by design; without
                    # it, positive cases reach the services instead of stopping at the door.
                    for key in ("tenant", "user", "session"):
                        identity.pop(key, None)
                response = case.call_and_validate(headers=headers)
                calls["count"] += 1
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                assert response.status_code < 500
                if mode == GenerationMode.POSITIVE and response.status_code == 422:
                    assert any(bound in response.json()["message"] for bound in BOUNDS), response.json()

            check()
    print(f"schemathesis: {len(operations)} operations, {calls['count']} calls, statuses {sorted(statuses.items())}")
    assert calls["count"] >= len(operations) * 2 * 5
