"""Resume tokens: minted from a CSPRNG, stored only as an HMAC digest (for lookup) and
sealed with a key derived from SECRET_KEY (so pause.list and the event stream can show the
token to those allowed to see it). A copy of the database alone lifts no pause."""

import base64
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

PREFIX = "hrbp_"


def _key(purpose: bytes) -> bytes:
    return hashlib.sha256(purpose + settings.SECRET_KEY.encode()).digest()


def token_mint() -> str:
    return PREFIX + secrets.token_urlsafe(32)  # 256 bits


def token_digest(token: str) -> str:
    return hmac.new(_key(b"harbor.pause-token.digest:"), token.encode(), hashlib.sha256).hexdigest()


def _fernet() -> Fernet:
    return Fernet(base64.urlsafe_b64encode(_key(b"harbor.pause-token.seal:")))


def token_seal(token: str) -> str:
    return _fernet().encrypt(token.encode()).decode()


def token_unseal(sealed: str) -> str | None:
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except (InvalidToken, ValueError):
        return None
