"""Remote agents' credentials (an Authorization header, an answered access code), encrypted
at rest with the same sealing as the OAuth leg's secrets, under the credential key list
(HARBOR_CREDENTIAL_KEYS): one mechanism and one key list for every secret a tool holds."""

from approvals.oauth import sealing


def seal(secret: str) -> str:
    return sealing.seal(secret) if secret else ""


def unseal(sealed: str) -> str:
    if not sealed:
        return ""
    try:
        value = sealing.unseal(sealed)
    except sealing.Unsealable:
        return ""  # sealed under a retired key: the admin sets it again
    return value if isinstance(value, str) else ""
