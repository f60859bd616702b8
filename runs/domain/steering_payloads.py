"""The payload rules of the nine steering instructions (PROTOCOL §3): a breach is
422 payload_invalid, and only the fields a method uses are kept."""

from runs.kernel.errors import HarborError, InvalidRequest, PayloadInvalid
from runs.models import DECISION_INSTRUCTIONS, Instruction

PRIORITY_RANGE = range(-1000, 1001)


def steering_payload_clean(method: str, payload: dict) -> dict:
    """Check each method's payload against its rules (PROTOCOL §3: a breach is
    422 payload_invalid); return only the fields it uses."""

    def optional_string(name: str, *, non_empty: bool = False) -> None:
        value = payload.get(name)
        if value is not None and (not isinstance(value, str) or (non_empty and not value)):
            raise PayloadInvalid(f"{method}: {name} must be a {'non-empty ' if non_empty else ''}string")

    if method == Instruction.CANCEL:
        if "hard" in payload and not isinstance(payload["hard"], bool):
            raise PayloadInvalid("cancel: hard must be a boolean")
        return {"hard": bool(payload.get("hard", False))}
    if method == Instruction.PAUSE:
        return {}
    if method in DECISION_INSTRUCTIONS:
        optional_string("token", non_empty=True)
        optional_string("reason")
        if "args" in payload and payload["args"] is not None and not isinstance(payload["args"], dict):
            raise PayloadInvalid("approve: args must be an object")
        # Edited arguments belong to an approve, an answer to a resume: on another decision
        # they would be dropped unseen, so they are refused.
        for name, owner in (("args", Instruction.APPROVE), ("input", Instruction.RESUME)):
            if payload.get(name) is not None and method != owner:
                raise PayloadInvalid(f"{name} may only accompany {owner.value}")
        return {k: v for k, v in payload.items() if k in {"token", "reason", "args", "input"} and v is not None}
    if method == Instruction.REDIRECT:
        goal = payload.get("goal")
        if not isinstance(goal, str) or not goal.strip():
            raise PayloadInvalid("redirect: goal must be a non-empty string")
        return {"goal": goal}
    if method == Instruction.USER_MESSAGE:
        message = payload.get("message")
        if not isinstance(message, str) or not message.strip():
            raise PayloadInvalid("user_message: message must be a non-empty string")
        return {"message": message}
    if method == Instruction.PRIORITIZE:
        priority_check(payload.get("priority"), error=PayloadInvalid)
        return {"priority": payload["priority"]}
    if not payload:
        raise PayloadInvalid("inject_context: the payload must be a non-empty object")
    return payload  # inject_context: any object


def priority_check(priority: object, *, error: type[HarborError] = InvalidRequest) -> None:
    # start's priority is a body field (400); prioritize's is a payload rule (422).
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITY_RANGE:
        raise error(f"priority must be an integer from {PRIORITY_RANGE.start} to {PRIORITY_RANGE.stop - 1}")
