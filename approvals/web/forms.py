"""The payload of an inbox decision, built from its posted form."""

from typing import Any

from django.http import QueryDict

from approvals.domain.tokens import token_unseal
from approvals.models import Pause
from runs.web.forms import edited_args, steering_payload

DECISION_METHODS = ("approve", "reject", "resume")


def decision_payload(method: str, pause: Pause, data: QueryDict) -> dict[str, Any]:
    """approve/reject/resume aimed at this exact pause: its token is unsealed on the server,
    so the page never carries one."""
    payload = steering_payload(method, data)
    if method == "approve" and pause.payload.get("Editable"):
        args = edited_args(data, pause.payload.get("Args") or {})
        if args:
            payload["args"] = args
    token = token_unseal(pause.token_sealed)
    if token:
        payload["token"] = token
    return payload
