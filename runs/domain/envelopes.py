"""The envelope of PROTOCOL §5: what a stored event looks like on the wire, with the keys a
pause event holds out of the log (its resume token, a sign-in's address and state) filled in
from the sealed copy on the pause, for a receiver the decision rule accepts."""

from typing import Any, Protocol

from approvals.models import Pause
from runs.domain import tokens
from runs.domain.event_types import Envelope

# Payload keys that carry a resume token. The log stores the pause reference instead and
# the envelope fills the token in from the sealed copy.
TOKEN_KEYS = ("Token", "PauseToken")
# Keys that carry a sign-in's one-time state (tool.auth_required, a2a.auth_required): whoever
# holds it can complete the sign-in, so they reach only those the token reaches, filled in
# from the pause's payload, where they are sealed.
SIGN_IN_KEYS = tokens.SIGN_IN_KEYS
SEALED = "<sealed>"  # placeholder a caller puts under a token key when the pause is passed


class Stored(Protocol):
    """An event as the log keeps it (runs.models.Event)."""

    type: str
    sequence: Any
    occurred_at: Any
    payload: Any
    run_id: Any
    user: Any
    session: Any

    @property
    def tenant(self) -> Any: ...


def envelope(event: Stored, *, tenant_slug: str | None = None, with_tokens: bool = True) -> Envelope:
    payload = dict(event.payload)
    pause_id = payload.pop("_pause", None)
    token_keys = payload.pop("_token_keys", [])
    if token_keys and pause_id:
        payload.update(_pause_capabilities(pause_id, token_keys) if with_tokens else dict.fromkeys(token_keys))
    return {
        "type": event.type,
        "sequence": event.sequence,
        "occurred_at": event.occurred_at.isoformat().replace("+00:00", "Z"),
        "tenant": event.tenant.slug if tenant_slug is None else tenant_slug,
        "user": event.user,
        "session": event.session,
        "run": event.run_id,
        "payload": payload,
    }


def capabilities(keys: list[str], token: str | None, sign_in: dict) -> dict[str, object]:
    """The values of a pause event's held keys, for a receiver the decision rule accepts:
    the resume token, and a sign-in's address and state (tokens.sign_in_unseal)."""
    return {key: token if key in TOKEN_KEYS else sign_in.get(key) for key in keys}


def _pause_capabilities(pause_id: str, keys: list[str]) -> dict[str, object]:
    found = Pause.objects.filter(pk=pause_id).values_list("token_sealed", "payload").first()
    if found is None:
        return dict.fromkeys(keys)
    sealed, pause_payload = found
    return capabilities(keys, tokens.token_unseal(sealed) if sealed else None, tokens.sign_in_unseal(pause_payload))
