"""API identity (PROTOCOL §1): a bearer JWT verified with asymmetric algorithms only, against
the public keys this deployment trusts.

- Production trusts only the keys configured in `HARBOR_JWT_PUBLIC_KEYS` (PEM text, or paths
  to PEM files separated by commas; a file may hold several keys). None configured: every
  token is refused — never an open door.
- The embedded default also trusts a development key pair, created on first use under
  `VAR_DIR`; `manage.py harbor_token` signs with it.

Every failure is `401 auth_rejected` (bad algorithm, signature, expiry, key, claims) or
`401 identity_required` (no token, no session) — failing closed, before any service runs.
"""

import hashlib
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.conf import settings
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from .errors import AuthRejected, IdentityRequired
from .identity import Caller, caller_resolve

log = logging.getLogger("harbor.auth")

# Asymmetric only: a shared-secret algorithm would let anyone holding a public key mint
# tokens (the classic HS256-with-the-public-key confusion), and `none` needs no key at all.
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
SESSION_HEADER = "HTTP_X_HARBOR_SESSION"
LEEWAY_SECONDS = 30
DEV_KEY_FILE = "jwt-dev-key.pem"
_SESSION = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII, no spaces
MAX_TENANT, MAX_USER = 50, 150


@dataclass(frozen=True)
class Claims:
    tenant: str
    user: str
    session: str | None
    scopes: frozenset[str]


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
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".jwt-dev-")
        try:
            os.write(fd, pem)
            os.close(fd)
            os.chmod(tmp, 0o600)
            try:
                os.link(tmp, path)  # atomic and exclusive: a concurrent creator's key wins
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


_cache: dict[tuple, dict] = {}


def trusted_keys() -> dict[str, object]:
    """{key id: public key} of every key this deployment trusts."""
    dev = bool(getattr(settings, "HARBOR_JWT_DEV_KEYS", False))
    configured = getattr(settings, "HARBOR_JWT_PUBLIC_KEYS", "")
    cache_key = (configured, dev, str(settings.VAR_DIR) if dev else "")
    if cache_key not in _cache:
        keys = configured_public_keys(configured)
        if dev:
            keys.append(dev_private_key().public_key())
        _cache.clear()
        _cache[cache_key] = {key_id(k): k for k in keys}
    return _cache[cache_key]


def _algorithm_fits(algorithm: str, key) -> bool:
    return isinstance(key, rsa.RSAPublicKey) if algorithm.startswith("RS") else isinstance(key, ec.EllipticCurvePublicKey)


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
    extra: dict | None = None,
) -> str:
    """Sign a Harbor JWT. Without `private_key` it is signed by the development key pair,
    which only the embedded default trusts. Used by `manage.py harbor_token` and tests."""
    key = private_key if private_key is not None else dev_private_key()
    if algorithm is None:
        algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    now = int(time.time())
    claims = {"tenant": tenant, "user": user, "scopes": list(scopes), "iat": now, "exp": now + ttl}
    if session is not None:
        claims["session"] = session
    claims.update(extra or {})
    return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": key_id(key.public_key())})


def token_verify(token: str) -> Claims:
    """Verify a bearer token and return its claims, or raise AuthRejected."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise AuthRejected("the bearer token is not a well-formed JWT") from None
    algorithm = header.get("alg")
    if algorithm not in ALGORITHMS:
        raise AuthRejected(f"JWT algorithm {algorithm!r} is not accepted; use one of {', '.join(ALGORITHMS)}")
    keys = trusted_keys()
    kid = header.get("kid")
    if kid is not None:
        candidates = [keys[kid]] if isinstance(kid, str) and kid in keys else []
    else:
        candidates = list(keys.values())
    candidates = [k for k in candidates if _algorithm_fits(algorithm, k)]
    if not candidates:
        raise AuthRejected("the token is not signed by a trusted key")
    claims = None
    for key in candidates:
        try:
            claims = jwt.decode(
                token, key, algorithms=[algorithm], leeway=LEEWAY_SECONDS,
                options={"require": ["exp"], "verify_aud": False},
            )
            break
        except jwt.ExpiredSignatureError:
            raise AuthRejected("the token has expired") from None
        except jwt.InvalidSignatureError:
            continue
        except jwt.PyJWTError as error:
            raise AuthRejected(f"the token was refused: {error}") from None
    if claims is None:
        raise AuthRejected("the token is not signed by a trusted key")
    return _claims(claims)


def _claims(claims: dict) -> Claims:
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
    return Claims(tenant=tenant, user=user, session=session, scopes=frozenset(scopes))


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
        tenant=claims.tenant, user=claims.user, session=session, scopes=claims.scopes,
        address=client_address(meta),
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
