"""The bounds on everything a remote agent sends, read from settings when a call begins (so a
test, or an admin's change, applies at once): time, bytes, and how much text a person sees."""

from django.conf import settings

from approvals.capped_http import plain_size as size


def connect_seconds() -> float:
    return float(settings.HARBOR_A2A_CONNECT_SECONDS)


def call_seconds() -> float:
    return float(settings.HARBOR_A2A_CALL_SECONDS)


def max_response_bytes() -> int:
    return int(settings.HARBOR_A2A_MAX_RESPONSE_BYTES)


def max_text_bytes() -> int:
    return int(settings.HARBOR_A2A_MAX_TEXT_BYTES)


def bounded_text(text: str, limit: int | None = None) -> str:
    """`text` if it fits in `limit` bytes (UTF-8), else its first `limit` bytes, cut on a
    character boundary, and a note saying how much the agent sent."""
    limit = max_text_bytes() if limit is None else limit
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return text
    kept = encoded[:limit].decode("utf-8", errors="ignore")  # a character cut in two is dropped
    return f"{kept}\n… (truncated: {size(len(encoded))} from the agent, showing the first {size(limit)})"
