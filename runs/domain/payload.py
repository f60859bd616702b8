"""Payload bounds of PROTOCOL §3, enforced before anything else; never truncated."""

import json
import math
from typing import Any, NoReturn

from runs.kernel.errors import PayloadInvalid

MAX_DEPTH = 6
MAX_KEYS = 64
MAX_ITEMS = 50
MAX_STRING = 4096
MAX_BYTES = 16 * 1024
# A whole /v1/ request body (PROTOCOL §7: 413 request_too_large).
MAX_REQUEST_BYTES = 64 * 1024
# Integers a JSON peer can hold exactly (I-JSON, RFC 7493); larger ones overflow SQLite
# and lose precision in every browser.
MAX_INTEGER = 2**53 - 1


def _not_json(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not a JSON value")


def json_loads(raw: str | bytes) -> Any:
    """Strict JSON: NaN and Infinity are refused (ValueError, like any other bad JSON) and
    nesting too deep for the parser is payload_invalid, never a RecursionError."""
    try:
        return json.loads(raw, parse_constant=_not_json)
    except RecursionError:
        raise PayloadInvalid(f"the JSON nests deeper than {MAX_DEPTH} levels") from None


def check_bounds(value: Any, *, what: str = "payload") -> None:
    _walk(value, depth=1, path=what)
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise PayloadInvalid(f"{what} is {size} bytes; the limit is {MAX_BYTES}")


def _walk(value: Any, *, depth: int, path: str) -> None:
    if isinstance(value, (dict, list)) and depth > MAX_DEPTH:
        raise PayloadInvalid(f"{path} nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        if len(value) > MAX_KEYS:
            raise PayloadInvalid(f"{path} has {len(value)} keys; the limit is {MAX_KEYS}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadInvalid(f"{path} has a non-string key")
            if len(key) > MAX_STRING:
                raise PayloadInvalid(f"{path} has a key over {MAX_STRING} characters")
            _walk(item, depth=depth + 1, path=f"{path}.{key[:64]}")
    elif isinstance(value, list):
        if len(value) > MAX_ITEMS:
            raise PayloadInvalid(f"{path} has {len(value)} items; the limit is {MAX_ITEMS}")
        for index, item in enumerate(value):
            _walk(item, depth=depth + 1, path=f"{path}[{index}]")
    elif isinstance(value, str):
        if len(value) > MAX_STRING:
            raise PayloadInvalid(f"{path} is {len(value)} characters; the limit is {MAX_STRING}")
    elif isinstance(value, float):
        if not math.isfinite(value):  # 1e400 parses as inf: no column or peer holds it
            raise PayloadInvalid(f"{path} is a number out of range")
    elif isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > MAX_INTEGER:
            raise PayloadInvalid(f"{path} is an integer beyond ±{MAX_INTEGER}")
    elif value is not None and not isinstance(value, bool):
        raise PayloadInvalid(f"{path} is not a JSON value")
