"""Resume tokens: minted from a CSPRNG, stored only as an HMAC digest (for lookup) and
sealed (so pause.list and the event stream can show the token to those allowed to see it).
A copy of the database alone lifts no pause.

The keys are `HARBOR_TOKEN_KEYS`, newest first, never SECRET_KEY itself (unless nothing else
is configured). Each key is stretched with HKDF into a digest key, a sealing key and a short
key id; a token carries the id of the key it was minted under (`hrbp_<kid>_<random>`), so
its digest is recomputed with that key after a rotation, and unsealing tries every key
(MultiFernet). Tokens from before key ids (`hrbp_<random>`) use the old SECRET_KEY-derived
keys."""

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

PREFIX = "hrbp_"

# A sign-in's address and one-time state (tool.auth_required, a2a.auth_required): whoever
# holds them can complete the sign-in, so a pause's payload keeps them sealed, as its token,
# under one key; they are shown only where the token is.
SIGN_IN_KEYS = ("AuthorizeURL", "State")
SIGN_IN_SEALED = "_sign_in"


@dataclass(frozen=True)
class TokenKey:
    kid: str
    digest: bytes
    seal: Fernet


def _hkdf(secret: str, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"harbor.pause-token", info=info).derive(secret.encode())


@lru_cache(maxsize=8)
def _derive(secret: str) -> TokenKey:
    return TokenKey(
        kid=_hkdf(secret, b"kid").hex()[:8],
        digest=_hkdf(secret, b"digest"),
        seal=Fernet(base64.urlsafe_b64encode(_hkdf(secret, b"seal"))),
    )


def _keys() -> list[TokenKey]:
    return [_derive(secret) for secret in settings.HARBOR_TOKEN_KEYS]


def _legacy_key(purpose: bytes) -> bytes:
    return hashlib.sha256(purpose + settings.SECRET_KEY.encode()).digest()


def token_mint() -> str:
    return f"{PREFIX}{_keys()[0].kid}_{secrets.token_urlsafe(32)}"  # 256 bits


def token_digest(token: str) -> str:
    kid, _, _ = token.removeprefix(PREFIX).partition("_")
    key = next((k.digest for k in _keys() if k.kid == kid), None)
    if key is None:  # an unknown or retired key id, or a token from before key ids
        key = _legacy_key(b"harbor.pause-token.digest:")
    return hmac.new(key, token.encode(), hashlib.sha256).hexdigest()


def _fernet() -> MultiFernet:
    legacy = Fernet(base64.urlsafe_b64encode(_legacy_key(b"harbor.pause-token.seal:")))
    return MultiFernet([k.seal for k in _keys()] + [legacy])


def token_seal(token: str) -> str:
    return _fernet().encrypt(token.encode()).decode()


def token_unseal(sealed: str) -> str | None:
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except (InvalidToken, ValueError):
        return None


def sign_in_seal(payload: dict) -> dict:
    """A pause's payload as it is stored: its sign-in's address and state sealed."""
    held = {key: payload[key] for key in SIGN_IN_KEYS if key in payload}
    if not held:
        return payload
    kept = {key: value for key, value in payload.items() if key not in SIGN_IN_KEYS}
    return {**kept, SIGN_IN_SEALED: token_seal(json.dumps(held))}


def sign_in_unseal(payload: dict | None) -> dict:
    """The sign-in's address and state a stored pause payload holds sealed ({}: none)."""
    return sign_in_open((payload or {}).get(SIGN_IN_SEALED))


def sign_in_open(sealed: object) -> dict:
    """A sealed sign-in's address and state (as a pause keeps it, or a push carries it)."""
    return json.loads(token_unseal(sealed) or "{}") if isinstance(sealed, str) else {}
