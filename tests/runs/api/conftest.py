"""API test helpers: keys the tests trust, tokens minted in-process, and a JSON client.

Test keys are generated once per session. They are also exported (as a file path in
HARBOR_JWT_PUBLIC_KEYS) before any live server starts, so a live server — which trusts only
configured keys in the PostgreSQL topology — accepts the tokens these tests mint."""

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.test import Client

from runs.identity.bearer_tokens import token_issue

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse  # the test client's response, in the stubs only

EC_KEY = ec.generate_private_key(ec.SECP256R1())
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _public_pem(key) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


TRUSTED_PEM = _public_pem(EC_KEY) + _public_pem(RSA_KEY)
_keys_dir = Path(tempfile.mkdtemp(prefix="harbor-test-keys-"))
atexit.register(shutil.rmtree, _keys_dir, ignore_errors=True)  # live servers read it until the session ends
(_keys_dir / "trusted.pem").write_text(TRUSTED_PEM)
os.environ.setdefault("HARBOR_JWT_PUBLIC_KEYS", str(_keys_dir / "trusted.pem"))


def mint(user: str, session: str | None = "s1", *, tenant: str | None = None, scopes=(), key=None, **kwargs) -> str:
    tenant = tenant or ("globex" if user == "gina" else "acme")
    return token_issue(tenant=tenant, user=user, session=session, scopes=scopes, private_key=key or EC_KEY, **kwargs)


@pytest.fixture(autouse=True)
def _trust_test_keys(settings):
    settings.HARBOR_JWT_PUBLIC_KEYS = TRUSTED_PEM
    settings.HARBOR_JWT_DEV_KEYS = False


class Api:
    """POST JSON as a user; every answer must be JSON."""

    def __init__(self) -> None:
        self.client = Client()

    def post(
        self,
        path: str,
        body=None,
        *,
        user: str | None = "alice",
        session: str | None = "s1",
        token: str | None = None,
        headers: dict | None = None,
        raw: bytes | str | None = None,
        **mint_kwargs,
    ) -> "_MonkeyPatchedWSGIResponse":
        extra: dict[str, Any] = {}
        if token is None and user is not None:
            token = mint(user, session, **mint_kwargs)
        if token is not None:
            extra["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        for name, value in (headers or {}).items():
            extra["HTTP_" + name.upper().replace("-", "_")] = value
        if body is None:
            body = {}
        if isinstance(body, dict) and "identity" not in body:
            body = {"identity": {}, **body}  # as every client sends it (PROTOCOL §2); raw= sends what it is given
        data = raw if raw is not None else json.dumps(body)
        response = self.client.post(path, data=data, content_type="application/json", **extra)
        assert response["Content-Type"].startswith("application/json"), response.content[:200]
        return response

    def ok(self, path: str, body=None, **kwargs) -> dict:
        response = self.post(path, body, **kwargs)
        assert response.status_code == 200, response.json()
        return response.json()

    def error(self, path: str, body=None, *, status: int, code: str, **kwargs) -> dict:
        response = self.post(path, body, **kwargs)
        payload = response.json()
        assert (response.status_code, payload.get("code")) == (status, code), payload
        # `fields`: PROTOCOL §7's extension, on a refused tool argument.
        assert {"code", "message"} <= set(payload) <= {"code", "message", "fields"} and payload["message"]
        return payload

    # Shortcuts for the protocol's routes.
    def start(self, query: str = "count to 3", agent_id: str = "countdown", **kwargs) -> str:
        body = {"identity": {}, "query": query, "agent_id": agent_id, **kwargs.pop("body", {})}
        return self.ok("/v1/control/start", body, **kwargs)["task_id"]

    def control(self, method: str, run: str, payload=None, **kwargs) -> "_MonkeyPatchedWSGIResponse":
        body = {"identity": {"run": run, **kwargs.pop("identity", {})}}
        if payload is not None:
            body["payload"] = payload
        if "event_id" in kwargs:
            body["event_id"] = kwargs.pop("event_id")
        return self.post(f"/v1/control/{method}", body, **kwargs)


@pytest.fixture
def api(people) -> Api:
    return Api()
