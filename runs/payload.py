"""Payload bounds of PROTOCOL §3, enforced before anything else; never truncated."""

import json
from typing import Any

from .errors import PayloadInvalid

MAX_DEPTH = 6
MAX_KEYS = 64
MAX_ITEMS = 50
MAX_STRING = 4096
MAX_BYTES = 16 * 1024


def check_bounds(value: Any, *, what: str = "payload") -> None:
    _walk(value, depth=1, path=what)
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
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
            _walk(item, depth=depth + 1, path=f"{path}.{key}")
    elif isinstance(value, list):
        if len(value) > MAX_ITEMS:
            raise PayloadInvalid(f"{path} has {len(value)} items; the limit is {MAX_ITEMS}")
        for index, item in enumerate(value):
            _walk(item, depth=depth + 1, path=f"{path}[{index}]")
    elif isinstance(value, str):
        if len(value) > MAX_STRING:
            raise PayloadInvalid(f"{path} is {len(value)} characters; the limit is {MAX_STRING}")
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise PayloadInvalid(f"{path} is not a JSON value")
