"""API identity (PROTOCOL §1): a bearer JWT verified with asymmetric algorithms only, against
the issuers this deployment trusts.

An issuer is trusted with keys (PEM files or text, and/or a JWKS URL) and is bound to the
tenants it may speak for: a token is accepted only if its `iss` names a trusted issuer, its
signature verifies with one of *that issuer's* keys, its `aud` is this server, and its
`tenant` is one the issuer may speak for. So a key trusted for one tenant cannot mint
identities in another.

- `HARBOR_JWT_ISSUERS` (JSON list) configures issuers; `HARBOR_JWT_PUBLIC_KEYS` (with
  `HARBOR_JWT_ISSUER`, `HARBOR_JWT_TENANTS`) is the single-issuer shorthand. None
  configured: every token is refused — never an open door.
- The embedded default also trusts a development key pair (issuer `harbor-dev`), created on
  first use under `VAR_DIR`; `manage.py harbor_token` signs with it.

Every failure is `401 auth_rejected` (bad algorithm, signature, expiry, key, issuer,
audience, claims) or `401 identity_required` (no token, no session) — failing closed, before
any service runs.
"""

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from harbor_site.owner_files import write_once
from runs.domain.errors import AuthRejected, IdentityRequired
from runs.identity.callers import Caller, caller_resolve

log = logging.getLogger("harbor.auth")

# Asymmetric only: a shared-secret algorithm would let anyone holding a public key mint
# tokens (the classic HS256-with-the-public-key confusion), and `none` needs no key at all.
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
SESSION_HEADER = "HTTP_X_HARBOR_SESSION"
LEEWAY_SECONDS = 30
DEV_KEY_FILE = "jwt-dev-key.pem"
DEV_ISSUER = "harbor-dev"
ANY_TENANT = "*"
_SESSION = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII, no spaces
MAX_TENANT, MAX_USER = 50, 150


@dataclass(frozen=True)
class Claims:
    tenant: str
    user: str
    session: str | None
    scopes: frozenset[str]
    issuer: str = DEV_ISSUER
    namespace: str = ""  # "" : the issuer's users are this server's own accounts


@dataclass(frozen=True)
class Issuer:
    """One trusted issuer: its keys, the tenants it may speak for, and the namespace its
    user names live in ("" for this server's own accounts)."""

    issuer: str
    tenants: frozenset[str]
    keys: tuple = ()  # (key id, public key)
    jwks_url: str = ""
    audience: str = ""
    namespace: str = ""

    def speaks_for(self, tenant: str) -> bool:
        return ANY_TENANT in self.tenants or tenant in self.tenants


# --- Keys ---------------------------------------------------------------------------------


def key_id(public_key) -> str:
    """A stable id for a public key: the SHA-256 of its SubjectPublicKeyInfo, shortened."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()[:16]


def _load_public_pems(text: str) -> list:
    blocks = re.findall(r"-----BEGIN [A-Z ]+-----.+?-----END [A-Z ]+-----", text, flags=re.S)
    keys = []
    for block in blocks:
        data = block.encode()
        if "CERTIFICATE" in block:
            from cryptography import x509

            keys.append(x509.load_pem_x509_certificate(data).public_key())
        elif "PRIVATE" in block:
            continue  # never read a private key as a trust anchor by accident
        else:
            keys.append(serialization.load_pem_public_key(data))
    return keys


def configured_public_keys(value: str) -> list:
    """Parse `HARBOR_JWT_PUBLIC_KEYS`: PEM text, or comma-separated paths to PEM files."""
    value = (value or "").strip()
    if not value:
        return []
    if "-----BEGIN" in value:
        return _load_public_pems(value)
    keys = []
    for path in (p.strip() for p in value.split(",")):
        if path:
            keys.extend(_load_public_pems(Path(path).read_text()))
    return keys


def dev_private_key():
    """The embedded default's development key pair (ES256), created on first use. Created
    by whichever process gets there first; the others read the same file."""
    path = Path(settings.VAR_DIR) / DEV_KEY_FILE
    if not path.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        write_once(path, pem)
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def _namespace_default(issuer: str) -> str:
    """Users of an external issuer live in their own namespace (its host name by default),
    so the same name from two issuers is two people, never one account."""
    return urlsplit(issuer).hostname or issuer


def _issuer_from(entry: dict) -> Issuer:
    if not isinstance(entry, dict) or not isinstance(entry.get("issuer"), str) or not entry["issuer"]:
        raise ImproperlyConfigured("each HARBOR_JWT_ISSUERS entry needs an 'issuer' string")
    tenants = entry.get("tenants")
    if isinstance(tenants, str):
        tenants = [t.strip() for t in tenants.split(",") if t.strip()]
    if not tenants or not all(isinstance(t, str) for t in tenants):
        raise ImproperlyConfigured(f"issuer {entry['issuer']!r}: list the tenants it may speak for ('*' for all)")
    keys = entry.get("keys", "")
    keys = configured_public_keys("\n".join(keys) if isinstance(keys, list) else keys)
    if not keys and not entry.get("jwks_url"):
        raise ImproperlyConfigured(f"issuer {entry['issuer']!r}: give 'keys' (PEM) or a 'jwks_url'")
    namespace = entry.get("namespace")
    return Issuer(
        issuer=entry["issuer"],
        tenants=frozenset(tenants),
        keys=tuple((key_id(k), k) for k in keys),
        jwks_url=entry.get("jwks_url", ""),
        audience=entry.get("audience", ""),
        namespace=_namespace_default(entry["issuer"]) if namespace is None else namespace,
    )


_cache: dict[tuple, dict] = {}


def trusted_issuers() -> dict[str, Issuer]:
    """{iss: Issuer} of every issuer this deployment trusts."""
    dev = bool(getattr(settings, "HARBOR_JWT_DEV_KEYS", False))
    configured = getattr(settings, "HARBOR_JWT_ISSUERS", [])
    single = (
        getattr(settings, "HARBOR_JWT_PUBLIC_KEYS", ""),
        getattr(settings, "HARBOR_JWT_ISSUER", "harbor"),
        getattr(settings, "HARBOR_JWT_TENANTS", ANY_TENANT),
    )
    cache_key = (json.dumps(configured, sort_keys=True), single, dev, str(settings.VAR_DIR) if dev else "")
    if cache_key not in _cache:
        issuers = [_issuer_from(entry) for entry in configured]
        if single[0].strip():
            # The single-issuer shorthand: one organisation's identity provider, whose users
            # are this server's own accounts.
            issuers.append(
                _issuer_from({"issuer": single[1], "keys": single[0], "tenants": single[2], "namespace": ""})
            )
        if dev:
            dev_key = dev_private_key().public_key()
            issuers.append(
                Issuer(issuer=DEV_ISSUER, tenants=frozenset({ANY_TENANT}), keys=((key_id(dev_key), dev_key),))
            )
        by_iss: dict[str, Issuer] = {}
        for issuer in issuers:
            if issuer.issuer in by_iss:
                raise ImproperlyConfigured(f"issuer {issuer.issuer!r} is configured twice")
            by_iss[issuer.issuer] = issuer
        _cache.clear()
        _cache[cache_key] = by_iss
    return _cache[cache_key]


# One cached JWKS client per URL: keys are fetched once and refreshed at most every
# `lifespan` seconds (an unknown kid triggers one refetch, rate limited by PyJWT's cooldown).
_jwks_clients: dict[str, jwt.PyJWKClient] = {}


def _jwks_keys(url: str, kid) -> list:
    client = _jwks_clients.get(url)
    if client is None:
        client = _jwks_clients[url] = jwt.PyJWKClient(url, cache_keys=True, lifespan=300, timeout=5)
    try:
        if isinstance(kid, str):
            return [client.get_signing_key(kid).key]
        return [k.key for k in client.get_signing_keys()]
    except jwt.PyJWKClientError as error:
        log.warning("JWKS %s: %s", url, error)
        return []


def _algorithm_fits(algorithm: str, key) -> bool:
    return (
        isinstance(key, rsa.RSAPublicKey) if algorithm.startswith("RS") else isinstance(key, ec.EllipticCurvePublicKey)
    )


def _audience() -> str:
    return getattr(settings, "HARBOR_JWT_AUDIENCE", "harbor")


# --- Tokens -------------------------------------------------------------------------------


def token_issue(
    *,
    tenant: str,
    user: str,
    session: str | None = None,
    scopes=(),
    ttl: int = 12 * 3600,
    private_key=None,
    algorithm: str | None = None,
    issuer: str | None = None,
    audience: str | None = None,
    extra: dict | None = None,
) -> str:
    """Sign a Harbor JWT. Without `private_key` it is signed by the development key pair
    (issuer `harbor-dev`), which only the embedded default trusts. Used by
    `manage.py harbor_token` and tests."""
    if issuer is None:
        issuer = DEV_ISSUER if private_key is None else getattr(settings, "HARBOR_JWT_ISSUER", "harbor")
    key = private_key if private_key is not None else dev_private_key()
    if algorithm is None:
        algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    now = int(time.time())
    claims = {
        "iss": issuer,
        "aud": audience or _audience(),
        "tenant": tenant,
        "user": user,
        "scopes": list(scopes),
        "iat": now,
        "exp": now + ttl,
    }
    if session is not None:
        claims["session"] = session
    claims.update(extra or {})
    return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": key_id(key.public_key())})


def _max_ttl() -> int:
    return int(getattr(settings, "HARBOR_JWT_MAX_TTL_SECONDS", 7 * 24 * 3600))


def token_verify(token: str) -> Claims:
    """Verify a bearer token and return its claims, or raise AuthRejected."""
    try:
        header = jwt.get_unverified_header(token)
        unverified = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise AuthRejected("the bearer token is not a well-formed JWT") from None
    algorithm = header.get("alg")
    if algorithm not in ALGORITHMS:
        raise AuthRejected(f"JWT algorithm {algorithm!r} is not accepted; use one of {', '.join(ALGORITHMS)}")
    # The issuer picks the keys: only the keys trusted for the issuer the token names are
    # tried, so one issuer's key never vouches for another issuer's claims.
    iss = unverified.get("iss")
    issuer = trusted_issuers().get(iss) if isinstance(iss, str) else None
    if issuer is None:
        raise AuthRejected("the token's issuer (iss) is not trusted")
    kid = header.get("kid")
    candidates = [k for k_id, k in issuer.keys if kid is None or k_id == kid]
    if issuer.jwks_url:
        candidates += _jwks_keys(issuer.jwks_url, kid)
    candidates = [k for k in candidates if _algorithm_fits(algorithm, k)]
    if not candidates:
        raise AuthRejected("the token is not signed by a key trusted for its issuer")
    claims = None
    for key in candidates:
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                leeway=LEEWAY_SECONDS,
                audience=issuer.audience or _audience(),
                issuer=issuer.issuer,
                options={"require": ["exp", "iss", "aud"]},
            )
            break
        except jwt.ExpiredSignatureError:
            raise AuthRejected("the token has expired") from None
        except jwt.InvalidSignatureError:
            continue
        except jwt.PyJWTError as error:
            raise AuthRejected(f"the token was refused: {error}") from None
    if claims is None:
        raise AuthRejected("the token is not signed by a key trusted for its issuer")
    exp = claims["exp"]
    # PyJWT accepts "123" and floats; a lifetime past the cap is a minting mistake or a
    # forgery that should not live for years.
    if type(exp) is not int or exp > time.time() + _max_ttl() + LEEWAY_SECONDS:
        raise AuthRejected("the token's exp is not a sensible expiry time")
    result = _claims(claims, issuer)
    if not issuer.speaks_for(result.tenant):
        raise AuthRejected("the token's issuer may not speak for this tenant")
    return result


def _claims(claims: dict, issuer: Issuer) -> Claims:
    tenant, user, session = claims.get("tenant"), claims.get("user"), claims.get("session")
    if not isinstance(tenant, str) or not 0 < len(tenant) <= MAX_TENANT:
        raise AuthRejected("the token has no valid tenant claim")
    if not isinstance(user, str) or not 0 < len(user) <= MAX_USER:
        raise AuthRejected("the token has no valid user claim")
    if session is not None and (not isinstance(session, str) or not _SESSION.match(session)):
        raise AuthRejected("the token's session claim is not a valid session id")
    scopes = claims.get("scopes", [])
    if isinstance(scopes, str):
        scopes = scopes.split()
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise AuthRejected("the token's scopes claim must be a list of strings")
    return Claims(
        tenant=tenant,
        user=user,
        session=session,
        scopes=frozenset(scopes),
        issuer=issuer.issuer,
        namespace=issuer.namespace,
    )


# --- Requests -----------------------------------------------------------------------------


def client_address(meta) -> str | None:
    return meta.get("REMOTE_ADDR") or None


def bearer_token(authorization: bytes | str) -> str | None:
    """The token of an `Authorization: Bearer …` header; None when there is no header."""
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthRejected("use Authorization: Bearer <JWT>")
    return token.strip()


def caller_from_headers(meta) -> Caller:
    """The verified caller of a request, from its WSGI/ASGI META. Raises IdentityRequired or
    AuthRejected; never infers identity from anything but the verified token."""
    token = bearer_token(meta.get("HTTP_AUTHORIZATION", ""))
    if token is None:
        raise IdentityRequired("send Authorization: Bearer <JWT>")
    claims = token_verify(token)
    session = meta.get(SESSION_HEADER)
    if session is not None and session != "":
        if not _SESSION.match(session):
            raise IdentityRequired("X-Harbor-Session must be 1 to 128 printable characters without spaces")
    else:
        session = claims.session
    if not session:
        raise IdentityRequired("no session: send X-Harbor-Session or a token with a session claim")
    return caller_resolve(
        tenant=claims.tenant,
        user=claims.user,
        session=session,
        scopes=claims.scopes,
        address=client_address(meta),
        namespace=claims.namespace,
    )


class BearerAuthentication(BaseAuthentication):
    """DRF authentication: `request.user` is the Django user, `request.auth` the Caller."""

    def authenticate(self, request):
        if not get_authorization_header(request):
            return None
        caller = caller_from_headers(request.META)
        return caller.user, caller

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="harbor"'
