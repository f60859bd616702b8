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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from runs.kernel.owner_files import write_once

log = logging.getLogger("harbor.auth")

# Asymmetric only: a shared-secret algorithm would let anyone holding a public key mint
# tokens (the classic HS256-with-the-public-key confusion), and `none` needs no key at all.
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
SESSION_HEADER = "HTTP_X_HARBOR_SESSION"
LEEWAY_SECONDS = 30
DEV_KEY_FILE = "jwt-dev-key.pem"
DEV_ISSUER = "harbor-dev"
ANY_TENANT = "*"
SESSION_PATTERN = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII, no spaces
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


def key_id(public_key: PublicKeyTypes) -> str:
    """A stable id for a public key: the SHA-256 of its SubjectPublicKeyInfo, shortened."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()[:16]


def _load_public_pems(text: str) -> list[PublicKeyTypes]:
    blocks = re.findall(r"-----BEGIN [A-Z ]+-----.+?-----END [A-Z ]+-----", text, flags=re.S)
    keys: list[PublicKeyTypes] = []
    for block in blocks:
        data = block.encode()
        if "CERTIFICATE" in block:
            keys.append(x509.load_pem_x509_certificate(data).public_key())
        elif "PRIVATE" in block:
            continue  # never read a private key as a trust anchor by accident
        else:
            keys.append(serialization.load_pem_public_key(data))
    return keys


def configured_public_keys(value: str) -> list[PublicKeyTypes]:
    """Parse `HARBOR_JWT_PUBLIC_KEYS`: PEM text, or comma-separated paths to PEM files."""
    value = (value or "").strip()
    if not value:
        return []
    if "-----BEGIN" in value:
        return _load_public_pems(value)
    keys: list[PublicKeyTypes] = []
    for path in (p.strip() for p in value.split(",")):
        if path:
            keys.extend(_load_public_pems(Path(path).read_text()))
    return keys


def dev_private_key() -> ec.EllipticCurvePrivateKey:
    """The embedded default's development key pair (ES256), created on first use. Created
    by whichever process gets there first; the others read the same file."""
    path = Path(settings.VAR_DIR) / DEV_KEY_FILE
    if not path.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        write_once(path, pem)
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, ec.EllipticCurvePrivateKey):
        raise ImproperlyConfigured(f"{path} does not hold an EC private key")
    return loaded


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
jwks_clients: dict[str, jwt.PyJWKClient] = {}


def jwks_keys(url: str, kid: object) -> list[PublicKeyTypes]:
    client = jwks_clients.get(url)
    if client is None:
        client = jwks_clients[url] = jwt.PyJWKClient(url, cache_keys=True, lifespan=300, timeout=5)
    try:
        if isinstance(kid, str):
            return [client.get_signing_key(kid).key]
        return [k.key for k in client.get_signing_keys()]
    except jwt.PyJWKClientError as error:
        log.warning("JWKS %s: %s", url, error)
        return []


def algorithm_fits(algorithm: str, key: object) -> bool:
    return (
        isinstance(key, rsa.RSAPublicKey) if algorithm.startswith("RS") else isinstance(key, ec.EllipticCurvePublicKey)
    )


def server_audience() -> str:
    return getattr(settings, "HARBOR_JWT_AUDIENCE", "harbor")
