"""PROTOCOL §1: issuer and audience are verified, each issuer speaks only for its tenants,
keys come from PEM or a JWKS URL, and a verified (issuer, user) is one person."""

import http.server
import json
import threading
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.contrib.auth import get_user_model

from runs.identity import issuers
from runs.identity.permissions import membership_grant
from runs.kernel.names import name_normalise
from runs.models import Membership, Role, Run, Tenant

from .conftest import EC_KEY, mint

ACME_KEY = ec.generate_private_key(ec.SECP256R1())
GLOBEX_KEY = ec.generate_private_key(ec.SECP256R1())


def _pem(key) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@pytest.fixture
def two_issuers(settings):
    """acme's identity provider speaks for acme only, globex's for globex only."""
    settings.HARBOR_JWT_PUBLIC_KEYS = ""
    settings.HARBOR_JWT_ISSUERS = [
        {"issuer": "https://idp.acme.test", "tenants": ["acme"], "keys": _pem(ACME_KEY), "namespace": ""},
        {"issuer": "https://idp.globex.test", "tenants": ["globex"], "keys": _pem(GLOBEX_KEY)},
    ]


def acme_token(user="alice", tenant="acme", **kwargs):
    return mint(user, tenant=tenant, key=ACME_KEY, issuer="https://idp.acme.test", **kwargs)


def globex_token(user="gina", tenant="globex", **kwargs):
    return mint(user, tenant=tenant, key=GLOBEX_KEY, issuer="https://idp.globex.test", **kwargs)


# --- Issuer and audience ------------------------------------------------------------------


def test_a_token_without_or_with_a_foreign_issuer_is_rejected(api):
    claims = {"tenant": "acme", "user": "alice", "session": "s1", "aud": "harbor", "exp": int(time.time()) + 60}
    api.error("/v1/tasks/list", token=jwt.encode(claims, EC_KEY, algorithm="ES256"), status=401, code="auth_rejected")
    api.error("/v1/tasks/list", token=mint("alice", issuer="https://evil.test"), status=401, code="auth_rejected")
    assert api.ok("/v1/tasks/list", token=mint("alice"))["total_rows"] == 0


@pytest.mark.parametrize("audience", ["someone-else", None])
def test_a_token_for_another_audience_is_rejected(api, audience):
    token = mint("alice", extra={"aud": audience} if audience else {"aud": None})
    if audience is None:  # no aud at all
        claims = jwt.decode(token, options={"verify_signature": False})
        del claims["aud"]
        token = jwt.encode(claims, EC_KEY, algorithm="ES256")
    api.error("/v1/tasks/list", token=token, status=401, code="auth_rejected")


def test_one_tenants_key_cannot_mint_another_tenants_users(api, two_issuers):
    assert api.ok("/v1/tasks/list", token=acme_token())["total_rows"] == 0
    assert api.ok("/v1/tasks/list", token=globex_token())["total_rows"] == 0
    # acme's key, speaking for globex: under its own issuer, and claiming globex's issuer.
    api.error("/v1/tasks/list", token=acme_token("gina", tenant="globex"), status=401, code="auth_rejected")
    forged = mint("gina", tenant="globex", key=ACME_KEY, issuer="https://idp.globex.test")
    api.error("/v1/tasks/list", token=forged, status=401, code="auth_rejected")
    api.error(
        "/v1/control/start",
        {"identity": {}, "query": "q", "agent_id": "countdown"},
        token=acme_token("gina", tenant="globex"),
        status=401,
        code="auth_rejected",
    )
    assert not Run.objects.filter(tenant__slug="globex").exists()


@pytest.mark.parametrize("exp", ["9999999999", 1e10, True, 32503680000, "soon"])
def test_a_non_numeric_or_absurd_exp_is_rejected(api, exp):
    api.error("/v1/tasks/list", token=mint("alice", extra={"exp": exp}), status=401, code="auth_rejected")


def test_an_issuer_config_must_name_its_tenants(settings):
    from django.core.exceptions import ImproperlyConfigured

    settings.HARBOR_JWT_ISSUERS = [{"issuer": "https://idp.test", "keys": _pem(ACME_KEY)}]
    with pytest.raises(ImproperlyConfigured):
        issuers.trusted_issuers()


# --- JWKS -----------------------------------------------------------------------------------


@pytest.fixture
def jwks_server():
    """A real HTTP server on the loopback serving a JWKS document; counts its fetches."""
    jwk = jwt.algorithms.ECAlgorithm.to_jwk(ACME_KEY.public_key(), as_dict=True)
    body = json.dumps({"keys": [{**jwk, "kid": "acme-2026", "use": "sig", "alg": "ES256"}]}).encode()
    fetches = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            fetches.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    issuers.jwks_clients.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json", fetches
    server.shutdown()
    server.server_close()
    issuers.jwks_clients.clear()


def test_keys_from_a_jwks_url_are_trusted_and_cached(api, settings, jwks_server):
    url, fetches = jwks_server
    settings.HARBOR_JWT_PUBLIC_KEYS = ""
    settings.HARBOR_JWT_ISSUERS = [
        {"issuer": "https://idp.acme.test", "tenants": ["acme"], "jwks_url": url, "namespace": ""}
    ]

    def token(key, kid="acme-2026", tenant="acme"):
        claims = {
            "iss": "https://idp.acme.test",
            "aud": "harbor",
            "tenant": tenant,
            "user": "alice",
            "session": "s1",
            "exp": int(time.time()) + 600,
        }
        return jwt.encode(claims, key, algorithm="ES256", headers={"kid": kid})

    assert api.ok("/v1/tasks/list", token=token(ACME_KEY))["total_rows"] == 0
    assert api.ok("/v1/tasks/list", token=token(ACME_KEY))["total_rows"] == 0
    assert len(fetches) == 1  # cached
    stranger = ec.generate_private_key(ec.SECP256R1())
    api.error("/v1/tasks/list", token=token(stranger), status=401, code="auth_rejected")
    api.error("/v1/tasks/list", token=token(stranger, kid="unknown"), status=401, code="auth_rejected")
    api.error("/v1/tasks/list", token=token(ACME_KEY, tenant="globex"), status=401, code="auth_rejected")


# --- People across tenants --------------------------------------------------------------------


def test_one_person_works_in_two_tenants_by_the_tokens_tenant(api, people):
    alice = get_user_model().objects.get(username="alice")
    membership_grant(tenant=people.globex, user=alice, role=Role.MEMBER)
    acme_run = api.start(token=mint("alice", tenant="acme"))
    globex_run = api.start(token=mint("alice", tenant="globex"))
    assert Run.objects.get(pk=acme_run).tenant.slug == "acme"
    assert Run.objects.get(pk=globex_run).tenant.slug == "globex"
    assert Run.objects.get(pk=globex_run).owner == alice
    # Each tenant shows only its own runs.
    listed = api.ok("/v1/tasks/list", token=mint("alice", tenant="globex"))["tasks"]
    assert [t["task_id"] for t in listed] == [globex_run]


def test_the_same_name_from_two_issuers_is_two_people(api, two_issuers):
    api.ok("/v1/tasks/list", token=acme_token("carol"))
    api.ok("/v1/tasks/list", token=globex_token("carol"))  # not refused: globex's carol is her own person
    users = get_user_model().objects.filter(username__endswith="carol")
    assert sorted(users.values_list("username", flat=True)) == ["carol", "idp.globex.test/carol"]
    assert Membership.objects.get(user__username="carol").tenant.slug == "acme"
    assert Membership.objects.get(user__username="idp.globex.test/carol").tenant.slug == "globex"


@pytest.mark.parametrize("spelling", ["Alice", "alice ", "ＡＬＩＣＥ", "ALİCE".replace("İ", "I")])
def test_user_names_are_normalised_to_one_person(api, spelling):
    run = api.start(token=mint(spelling))
    assert Run.objects.get(pk=run).owner.username == "alice"
    assert get_user_model().objects.filter(username__iexact="alice").count() == 1


@pytest.mark.parametrize(
    "lookalike",
    ["\u0430lice", "\u0430\u0441\u0435", "ali\u200bce", "al ice", "acme/alice", "\u0251lice", "al\u0131ce", "\u01c0ee"],
)
def test_look_alike_and_invisible_names_are_refused(api, lookalike):
    api.error("/v1/tasks/list", token=mint(lookalike), status=401, code="auth_rejected")
    assert get_user_model().objects.count() == 6  # the People fixture only


def test_names_in_one_script_other_than_latin_are_fine():
    assert [name_normalise(n) for n in ("José", "Søren", "Łukasz", "Zoë", "Ærø", "Nguyễn")] == [
        "josé",
        "søren",
        "łukasz",
        "zoë",
        "ærø",
        "nguyễn",
    ]
    assert name_normalise("Дмитрий") == "дмитрий"
    assert name_normalise("ΣΩΚΡΑΤΗΣ") == "σωκρατησ"


def test_an_unknown_tenant_is_refused_unless_auto_provisioning_is_on(api, settings, two_issuers):
    api.error("/v1/tasks/list", token=mint("alice", tenant="initech", key=EC_KEY), status=401, code="auth_rejected")
    settings.HARBOR_AUTO_PROVISION_TENANTS = True
    # An issuer bound to other tenants still cannot create one.
    api.error("/v1/tasks/list", token=acme_token("alice", tenant="initech"), status=401, code="auth_rejected")
    assert not Tenant.objects.filter(slug="initech").exists()
    settings.HARBOR_JWT_ISSUERS = settings.HARBOR_JWT_ISSUERS + [
        {"issuer": "https://idp.initech.test", "tenants": ["initech"], "keys": _pem(EC_KEY)}
    ]
    api.ok("/v1/tasks/list", token=mint("ivan", tenant="initech", key=EC_KEY, issuer="https://idp.initech.test"))
    assert Membership.objects.get(tenant__slug="initech").user.username == "idp.initech.test/ivan"


def test_a_body_identity_spelling_the_tokens_user_differently_is_no_contradiction(api, two_issuers):
    body = {"identity": {"user": "Alice", "tenant": "acme"}, "query": "q", "agent_id": "countdown"}
    assert api.ok("/v1/control/start", body, token=acme_token("Alice"))["reused"] is False
    body = {"identity": {"user": "carol"}, "query": "q", "agent_id": "countdown"}
    assert api.ok("/v1/control/start", body, token=globex_token("carol"))["reused"] is False
    for other in ("bob", "idp.globex.test/carol"):
        api.error(
            "/v1/control/start",
            {"identity": {"user": other}, "query": "q", "agent_id": "countdown"},
            token=acme_token("Alice"),
            status=401,
            code="identity_required",
        )
