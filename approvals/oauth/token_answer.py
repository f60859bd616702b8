"""What Harbor takes from a provider's token answer, checked before anything is stored:
strings of bounded length (HARBOR_OAUTH_MAX_TOKEN_CHARS, HARBOR_OAUTH_MAX_SCOPE_CHARS) and
an expiry that is a real moment (no 1e400, no 10**30 seconds). Anything else makes the
answer unusable, which the callback reports as a failed exchange."""

import math
import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings

# Longer than any provider's tokens live; beyond it an expiry is nonsense, not a promise.
LONGEST_EXPIRY_SECONDS = 10 * 366 * 24 * 3600


class UnusableAnswer(Exception):
    """The provider answered, but not with a token Harbor can keep."""


def _text(answer: Mapping[str, Any], key: str, limit: int, *, required: bool = False) -> str:
    value = answer.get(key)
    if value is None or value == "":
        if required:
            raise UnusableAnswer(f"the provider's token response has no {key.replace('_', ' ')}")
        return ""
    if not isinstance(value, str):
        raise UnusableAnswer(f"the provider's {key} is not a string")
    if len(value) > limit:
        raise UnusableAnswer(f"the provider's {key} is longer than {limit} characters")
    return value


def _seconds(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnusableAnswer(f"the provider's {key} is not a number")
    try:
        seconds = float(value)
    except (ValueError, OverflowError):
        raise UnusableAnswer(f"the provider's {key} is not a number") from None
    if not math.isfinite(seconds):
        raise UnusableAnswer(f"the provider's {key} is not a finite number")
    return seconds


def _expires_at(answer: Mapping[str, Any]) -> float | None:
    """When the access token expires (seconds since the epoch), or None when not said."""
    now = time.time()
    if answer.get("expires_in") not in (None, ""):
        lifetime = _seconds(answer["expires_in"], "expires_in")
        if lifetime < 0:
            raise UnusableAnswer("the provider's token expiry is out of range")
        expires_at = now + lifetime
    elif answer.get("expires_at") not in (None, ""):
        expires_at = _seconds(answer["expires_at"], "expires_at")
    else:
        return None
    if not 0 <= expires_at <= now + LONGEST_EXPIRY_SECONDS:
        raise UnusableAnswer("the provider's token expiry is out of range")
    return expires_at


def checked_token(answer: Any) -> dict[str, Any]:
    """The parts of a token answer Harbor keeps, each checked (UnusableAnswer if not)."""
    if not isinstance(answer, Mapping):
        raise UnusableAnswer("the provider's token response is not a JSON object")
    token_limit, scope_limit = settings.HARBOR_OAUTH_MAX_TOKEN_CHARS, settings.HARBOR_OAUTH_MAX_SCOPE_CHARS
    return {
        "access_token": _text(answer, "access_token", token_limit, required=True),
        "refresh_token": _text(answer, "refresh_token", token_limit),
        "token_type": _text(answer, "token_type", 40) or "Bearer",
        "scope": _text(answer, "scope", scope_limit),
        "expires_at": _expires_at(answer),
    }
