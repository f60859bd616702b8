"""PROTOCOL §1: the auth pipeline fails closed, and identity comes only from the token."""

import base64
import hashlib
import hmac
import json
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from django.core.management import call_command
from django.core.management.base import CommandError

from runs.identity import bearer_tokens as auth
from runs.identity import issuers
from runs.models import Membership, Run

from .conftest import EC_KEY, RSA_KEY, TRUSTED_PEM, mint


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forge(header: dict, claims: dict, signature: bytes = b"") -> str:
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(signature)}" if signature else f"{signing_input}."


def _claims(**overrides) -> dict:
    return {
        "tenant": "acme",
        "user": "alice",
        "session": "s1",
        "scopes": [],
        "exp": int(time.time()) + 600,
        **overrides,
    }


def test_alg_none_is_rejected(api):
    token = _forge({"alg": "none", "typ": "JWT"}, _claims(scopes=["admin"]))
    api.error("/v1/tasks/list", token=token, status=401, code="auth_rejected")


def test_hs256_signed_with_the_public_key_as_secret_is_rejected(api):
    header, claims = {"alg": "HS256", "typ": "JWT"}, _claims(scopes=["admin"])
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = hmac.new(TRUSTED_PEM.encode(), signing_input.encode(), hashlib.sha256).digest()
    response = api.error("/v1/tasks/list", token=f"{signing_input}.{_b64(signature)}", status=401, code="auth_rejected")
    assert "HS256" in response["message"]


def test_an_expired_token_is_rejected(api):
    api.error("/v1/tasks/list", token=mint("alice", ttl=-3600), status=401, code="auth_rejected")


def test_a_token_from_an_unknown_key_is_rejected(api):
    stranger = ec.generate_private_key(ec.SECP256R1())
    api.error("/v1/tasks/list", token=mint("alice", key=stranger), status=401, code="auth_rejected")


def test_an_unknown_key_claiming_a_trusted_kid_is_rejected(api):
    stranger = ec.generate_private_key(ec.SECP256R1())
    import jwt

    token = jwt.encode(_claims(), stranger, algorithm="ES256", headers={"kid": issuers.key_id(EC_KEY.public_key())})
    api.error("/v1/tasks/list", token=token, status=401, code="auth_rejected")


def test_a_tampered_token_is_rejected(api):
    head, body, sig = mint("alice").split(".")
    other = _b64(json.dumps(_claims(user="ada", scopes=["admin"])).encode())
    api.error("/v1/tasks/list", token=f"{head}.{other}.{sig}", status=401, code="auth_rejected")


@pytest.mark.parametrize("token", ["not-a-jwt", "a.b.c", ""])
def test_garbage_tokens_are_rejected(api, token):
    response = api.post("/v1/tasks/list", headers={"Authorization": f"Bearer {token}"}, user=None)
    assert response.status_code == 401 and response.json()["code"] in ("auth_rejected", "identity_required")


def test_a_token_without_exp_is_rejected(api):
    import jwt

    claims = _claims()
    del claims["exp"]
    api.error("/v1/tasks/list", token=jwt.encode(claims, EC_KEY, algorithm="ES256"), status=401, code="auth_rejected")


def test_rs256_keys_are_accepted(api):
    assert api.ok("/v1/tasks/list", token=mint("alice", key=RSA_KEY))["total_rows"] == 0


def test_no_token_is_identity_required(api):
    response = api.error("/v1/tasks/list", user=None, status=401, code="identity_required")
    assert response


def test_another_scheme_is_rejected(api):
    api.error(
        "/v1/tasks/list", user=None, headers={"Authorization": "Basic YWxpY2U6eA=="}, status=401, code="auth_rejected"
    )


def test_no_session_claim_and_no_header_is_identity_required(api):
    api.error("/v1/tasks/list", token=mint("alice", session=None), status=401, code="identity_required")


def test_the_session_header_replaces_the_claim(api):
    run = api.start(token=mint("alice", session=None), headers={"X-Harbor-Session": "from-header"})
    assert Run.objects.get(pk=run).session == "from-header"
    run = api.start(token=mint("alice", session="claim"), headers={"X-Harbor-Session": "header"})
    assert Run.objects.get(pk=run).session == "header"


def test_a_malformed_session_header_is_identity_required(api):
    api.error("/v1/tasks/list", headers={"X-Harbor-Session": "x" * 200}, status=401, code="identity_required")


@pytest.mark.parametrize("identity", [{"tenant": "globex"}, {"user": "bob"}, {"session": "s2"}])
def test_a_body_identity_contradicting_the_token_is_refused(api, identity):
    api.error(
        "/v1/control/start",
        {"identity": identity, "query": "q", "agent_id": "countdown"},
        status=401,
        code="identity_required",
    )
    assert not Run.objects.exists()


def test_a_body_identity_repeating_the_token_is_fine(api):
    body = {"identity": {"tenant": "acme", "user": "alice", "session": "s1"}, "query": "q", "agent_id": "countdown"}
    assert api.ok("/v1/control/start", body)["reused"] is False


def test_an_unknown_tenant_is_rejected(api):
    api.error("/v1/tasks/list", token=mint("alice", tenant="initech"), status=401, code="auth_rejected")


def test_a_user_of_another_tenant_is_rejected(api):
    api.error("/v1/tasks/list", token=mint("gina", tenant="acme"), status=401, code="auth_rejected")


def test_a_first_seen_user_in_a_known_tenant_is_provisioned_as_a_member(api):
    api.ok("/v1/tasks/list", token=mint("newcomer"))
    assert Membership.objects.get(user__username="newcomer").role == "member"


def test_the_admin_scope_claim_makes_an_admin(api):
    run = api.start(user="alice")
    api.error(
        "/v1/control/prioritize",
        {"identity": {"run": run}, "payload": {"priority": 5}},
        user="mallory",
        status=404,
        code="not_found",
    )
    assert api.ok(
        "/v1/control/prioritize",
        {"identity": {"run": run}, "payload": {"priority": 5}},
        user="mallory",
        scopes=["admin"],
    )["accepted"]


def test_the_development_key_pair_is_created_once_and_trusted_by_the_embedded_default(settings, tmp_path, capsys):
    settings.VAR_DIR = tmp_path
    settings.HARBOR_JWT_DEV_KEYS = True
    call_command("harbor_token", "--tenant", "acme", "--user", "alice", "--session", "s1", "--scope", "admin")
    token = capsys.readouterr().out.strip()
    assert (tmp_path / issuers.DEV_KEY_FILE).stat().st_mode & 0o777 == 0o600
    claims = auth.token_verify(token)
    assert (claims.tenant, claims.user, claims.session, claims.scopes) == ("acme", "alice", "s1", frozenset({"admin"}))
    settings.HARBOR_JWT_DEV_KEYS = False  # production: only configured keys
    with pytest.raises(auth.AuthRejected):
        auth.token_verify(token)
    with pytest.raises(CommandError):
        call_command("harbor_token", "--tenant", "acme", "--user", "alice")


def test_production_with_no_configured_key_refuses_every_token(settings):
    settings.HARBOR_JWT_PUBLIC_KEYS = ""
    with pytest.raises(auth.AuthRejected):
        auth.token_verify(mint("alice"))


def test_keys_can_be_configured_as_paths(settings, tmp_path):
    (tmp_path / "a.pem").write_text(TRUSTED_PEM)
    settings.HARBOR_JWT_PUBLIC_KEYS = f"{tmp_path / 'a.pem'}"
    assert auth.token_verify(mint("alice", key=RSA_KEY)).user == "alice"


def test_harbor_token_signs_with_a_given_private_key(settings, tmp_path, capsys):
    from cryptography.hazmat.primitives import serialization

    path = tmp_path / "key.pem"
    path.write_bytes(
        EC_KEY.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    call_command("harbor_token", "--tenant", "acme", "--user", "bob", "--private-key", str(path))
    claims = auth.token_verify(capsys.readouterr().out.strip())
    assert (claims.user, claims.session) == ("bob", None)
