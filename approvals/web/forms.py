"""The payload of an inbox decision, built from its posted form."""

from typing import Any

from django.http import QueryDict

from approvals.models import Pause
from runs.web.forms import edited_args, steering_payload


def decision_payload(method: str, pause: Pause, data: QueryDict) -> dict[str, Any]:
    """approve/reject/resume of this pause; the pause is named by its id (the page never
    carries a resume token)."""
    payload = steering_payload(method, data)
    if method == "approve" and pause.payload.get("Editable"):
        args = edited_args(data, pause.payload.get("Args") or {})
        if args:
            payload["args"] = args
    return payload
