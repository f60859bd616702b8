"""Forms of the console: starting a run, and the payload each steering control sends."""

import secrets
from collections.abc import Mapping
from typing import Any

from django import forms

from runs.application.catalog import agents_offered
from runs.domain.payload import MAX_STRING, json_loads
from runs.domain.steering_payloads import PRIORITY_RANGE
from runs.kernel.errors import PayloadInvalid
from runs.models import DECISION_INSTRUCTIONS, Instruction


class StartRunForm(forms.Form):
    agent_id = forms.ChoiceField(label="Agent")
    query = forms.CharField(
        label="Query",
        max_length=MAX_STRING,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "deploy build 42 to staging"}),
    )
    priority = forms.IntegerField(
        label="Priority", initial=0, min_value=PRIORITY_RANGE.start, max_value=PRIORITY_RANGE.stop - 1
    )
    # One per rendered form: the same form sent twice (a resubmission, a double post) starts
    # one run, as a start's idempotency_key does on the protocol.
    submission = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("initial", {}).setdefault("submission", secrets.token_urlsafe(16))
        super().__init__(*args, **kwargs)
        agent_field = self.fields["agent_id"]
        assert isinstance(agent_field, forms.ChoiceField)
        agent_field.choices = [(a.id, f"{a.id} — {a.description}") for a in agents_offered()]


class SteeringFormError(ValueError):
    """A steering form that cannot be turned into a payload; the message is shown as is."""


def parse_value(text: str, original: object = None) -> Any:
    """An edited value, keeping the original's type where the text parses as it."""
    if isinstance(original, str):
        return text
    return _parse_json(text, fallback=text)


def _parse_json(text: str, *, fallback: object = None) -> Any:
    """Strict JSON (no NaN or Infinity), or the fallback for text that is not JSON. JSON
    nested too deep to parse is a plain form error, never a server error."""
    try:
        return json_loads(text)
    except ValueError:
        return fallback
    except PayloadInvalid as error:
        raise SteeringFormError(f"Not accepted: {error.message}.") from None


def edited_args(data: Mapping[str, str], original: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments an approver changed (fields `arg-<name>`), or None for no edits."""
    changed: dict[str, Any] = {}
    for name, value in original.items():
        key = f"arg-{name}"
        if key not in data:
            continue
        new = parse_value(data[key], value)
        if new != value:
            changed[name] = new
    return changed or None


def steering_payload(method: str, data: Mapping[str, str]) -> dict[str, Any]:
    """The protocol payload of one steering method, built from a posted form."""
    text = lambda name: (data.get(name) or "").strip()  # noqa: E731
    if method == Instruction.CANCEL:
        return {"hard": data.get("hard") in ("on", "true", "1")}
    if method in (Instruction.PAUSE,):
        return {}
    if method in DECISION_INSTRUCTIONS:
        payload = {"reason": text("reason")} if text("reason") else {}
        if method == Instruction.RESUME and text("input"):
            payload["input"] = text("input")
        return payload
    if method == Instruction.REDIRECT:
        if not text("goal"):
            raise SteeringFormError("Give the new goal to redirect the run to.")
        return {"goal": text("goal")}
    if method == Instruction.USER_MESSAGE:
        if not text("message"):
            raise SteeringFormError("Write the message to send to the run.")
        return {"message": text("message")}
    if method == Instruction.INJECT_CONTEXT:
        raw = text("context")
        if not raw:
            raise SteeringFormError("Give the context to inject (text, or a JSON object).")
        parsed = _parse_json(raw)
        return parsed if isinstance(parsed, dict) and parsed else {"note": raw}
    if method == Instruction.PRIORITIZE:
        try:
            return {"priority": int(text("priority"))}
        except ValueError:
            raise SteeringFormError("Priority must be a whole number.") from None
    raise SteeringFormError(f"Unknown steering method {method!r}.")
