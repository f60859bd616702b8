"""Bearer JWTs: minted with the development key (`manage.py harbor_token`) and verified
against the trusted issuers (runs.identity.issuers) — signature, expiry, audience, tenant."""

import logging
import time
from collections.abc import Iterable

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.conf import settings

from runs.identity.issuers import (
    ALGORITHMS,
    DEV_ISSUER,
    LEEWAY_SECONDS,
    MAX_TENANT,
    MAX_USER,
    SESSION_PATTERN,
    Claims,
    Issuer,
    algorithm_fits,
    dev_private_key,
    jwks_keys,
    key_id,
    server_audience,
    trusted_issuers,
)
from runs.identity.sessions import PAGES_SESSION
from runs.kernel.errors import AuthRejected

log = logging.getLogger("harbor.auth")

# --- Tokens -------------------------------------------------------------------------------


def token_issue(
    *,
    tenant: str,
    user: str,
    session: str | None = None,
    scopes: Iterable[str] = (),
    ttl: int = 12 * 3600,
    private_key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | None = None,
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
        "aud": audience or server_audience(),
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
        candidates += jwks_keys(issuer.jwks_url, kid)
    candidates = [k for k in candidates if algorithm_fits(algorithm, k)]
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
                audience=issuer.audience or server_audience(),
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
    if session is not None and (not isinstance(session, str) or not SESSION_PATTERN.match(session)):
        raise AuthRejected("the token's session claim is not a valid session id")
    if session == PAGES_SESSION:  # the pages' own: a token acting as it would hold their pauses
        raise AuthRejected(f"the session {PAGES_SESSION!r} belongs to the web pages; a token may not claim it")
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
