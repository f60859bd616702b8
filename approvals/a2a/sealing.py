"""Remote agents' credentials, encrypted at rest: keys derived (HKDF) from the server's
token key list, newest first, so a rotation re-seals on the next save and old values still
open (MultiFernet)."""

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


def _fernet() -> MultiFernet:
    keys = []
    for secret in settings.HARBOR_TOKEN_KEYS:
        raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"harbor.a2a-credential", info=b"seal").derive(
            secret.encode()
        )
        keys.append(Fernet(base64.urlsafe_b64encode(raw)))
    return MultiFernet(keys)


def seal(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode() if secret else ""


def unseal(sealed: str) -> str:
    if not sealed:
        return ""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        return ""  # sealed under a retired key: the admin sets it again
