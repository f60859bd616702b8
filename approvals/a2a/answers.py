"""What a resume of an `a2a` pause may carry: a non-empty text answer of bounded size. An
answer to an auth-required pause is a credential: it is sealed before it is stored, and
only the tool opens it."""

from approvals.models import Pause
from runs.domain.tokens import SIGN_IN_SEALED
from runs.kernel.errors import PayloadInvalid

from .sealing import seal, unseal

MAX_ANSWER_CHARS = 2000
AUTH_REASON = "external_event"


def a2a_input(pause: Pause, value: object) -> object:
    """The value to store for a resume of an a2a pause, or 422 payload_invalid. A pause the
    OAuth leg resolves (its sign-in sealed in the payload) is resumed with none: the token
    comes from the sign-in."""
    if value is None and SIGN_IN_SEALED in (pause.payload or {}):
        return None
    if not isinstance(value, str) or not value.strip():
        raise PayloadInvalid("input must be a non-empty text answer to the remote agent's question")
    if len(value) > MAX_ANSWER_CHARS:
        raise PayloadInvalid(f"input is too long: at most {MAX_ANSWER_CHARS} characters")
    answer = value.strip()
    return {"sealed": seal(answer)} if pause.reason == AUTH_REASON else answer


def unseal_answer(value: object) -> str:
    """The answer as the tool sends it."""
    if isinstance(value, dict) and "sealed" in value:
        return unseal(str(value["sealed"]))
    return str(value or "")
