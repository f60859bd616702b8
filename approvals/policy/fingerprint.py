"""What an approval binds to: the exact arguments of the call it approved."""

import hashlib
import json
from typing import Any


def arguments_fingerprint(arguments: dict[str, Any]) -> str:
    """SHA-256 (hex) of the arguments as canonical JSON: keys sorted, no whitespace, UTF-8,
    non-ASCII kept as is. An approval is tied to this value; arguments edited after it give
    another fingerprint, so the approval does not carry over to them."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
