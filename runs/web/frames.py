"""One event as a websocket frame the pages can always take.

An event's payload has no size bound of its own (a tool's result, an answer), but a
websocket peer refuses a message past its limit (1 MiB for Daphne's own default and for
common clients) and then hears nothing more. A frame past HARBOR_WS_MAX_FRAME_BYTES keeps
every small payload field whole (tokens, reasons, names) and cuts the large ones, each with
a note, and says so with `"truncated": true`; the durable log and the pages' own reads keep
the whole event."""

import json
from collections.abc import Mapping
from typing import Any

from django.conf import settings

NOTE = " … [cut: {size} bytes in all; the page shows the whole event after a reload]"


def max_frame_bytes() -> int:
    return int(getattr(settings, "HARBOR_WS_MAX_FRAME_BYTES", 512 * 1024))


def frame_text(envelope: Mapping[str, Any]) -> str:
    """The envelope as JSON text of at most max_frame_bytes() bytes (ASCII: a character is a byte)."""
    text = json.dumps(envelope)
    limit = max_frame_bytes()
    if len(text) <= limit:
        return text
    payload = envelope.get("payload") or {}
    share = limit // (2 * max(1, len(payload)))  # each field's part of half the frame
    cut = {key: value if len(json.dumps(value)) <= share else _clipped(value, share) for key, value in payload.items()}
    text = json.dumps({**envelope, "payload": cut, "truncated": True})
    if len(text) <= limit:
        return text
    return json.dumps({**envelope, "payload": {}, "truncated": True})  # too many fields to keep any


def _clipped(value: Any, share: int) -> str:
    whole = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    # A character may take six bytes escaped (\uXXXX): keep few enough to fit in any case.
    return whole[: max(0, share // 6 - len(NOTE))] + NOTE.format(size=len(whole.encode()))
