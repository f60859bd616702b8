"""Encryption at rest for OAuth secrets (credentials, client secrets, PKCE verifiers) and
keyed digests for flow states, under their own rotatable key list HARBOR_CREDENTIAL_KEYS
(newest first). Each key is stretched with HKDF into a sealing key and a digest key:
sealing uses the newest and unseals with any (MultiFernet); a digest is looked up under
every key, so a rotation strands no open flow. A copy of the database alone holds nothing
usable."""

import base64
import hashlib
import hmac
import json
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


class Unsealable(Exception):
    """Sealed under a key that is no longer configured (or tampered with)."""


def _hkdf(secret: str, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"harbor.oauth-credential", info=info).derive(
        secret.encode()
    )


@lru_cache(maxsize=8)
def _derive(secret: str) -> tuple[Fernet, bytes]:
    return Fernet(base64.urlsafe_b64encode(_hkdf(secret, b"seal"))), _hkdf(secret, b"digest")


def _keys() -> list[tuple[Fernet, bytes]]:
    return [_derive(secret) for secret in settings.HARBOR_CREDENTIAL_KEYS]


def seal(value: Any) -> str:
    """Encrypt any JSON value under the newest key."""
    return MultiFernet([f for f, _ in _keys()]).encrypt(json.dumps(value).encode()).decode()


def unseal(sealed: str) -> Any:
    try:
        return json.loads(MultiFernet([f for f, _ in _keys()]).decrypt(sealed.encode()))
    except (InvalidToken, ValueError) as error:
        raise Unsealable("sealed under a key that is not configured") from error


def reseal(sealed: str) -> str:
    """Re-encrypt under the newest key (for a rotation)."""
    return seal(unseal(sealed))


def digests(value: str) -> list[str]:
    """The keyed digest of `value` under every configured key, the newest first."""
    return [hmac.new(key, value.encode(), hashlib.sha256).hexdigest() for _, key in _keys()]
