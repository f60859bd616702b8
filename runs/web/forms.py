"""Forms of the console: starting a run, and the payload each steering control sends."""

import secrets
from collections.abc import Mapping
from typing import Any

from django import forms
from rest_framework import serializers

from runs.application.catalog import agents_offered
from runs.domain import instructions
from runs.domain.instruction_payloads import PRIORITY_RANGE, InstructionPayload, payload_clean
from runs.domain.payload import MAX_STRING, json_loads
from runs.kernel.errors import PayloadInvalid, UnknownMethod
from runs.web.access import error_text


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


# What a page never reads as a payload field: it names a pause by its id, never a token, and
# edited arguments come from their own fields (edited_args).
PAGE_SKIPS = frozenset({"token", "args"})
# A checkbox posts "on" or nothing; any other value is passed on, for the schema to refuse.
CHECKBOX = {"on": True, "true": True, "1": True, "": False, "off": False, "false": False, "0": False}


def steering_payload(method: str, data: Mapping[str, str]) -> dict[str, Any]:
    """The protocol payload of one steering method, read from a posted form by the fields of
    the method's payload schema and checked by that schema (runs.domain.instructions): a page
    shows the field error the protocol answers."""
    try:
        schema = instructions.spec_for(method).payload
    except UnknownMethod:
        raise SteeringFormError(f"Unknown steering method {method!r}.") from None
    payload = _context_read(data) if schema.free_form else _fields_read(schema, data)
    try:
        return payload_clean(schema, payload)
    except PayloadInvalid as error:
        raise SteeringFormError(error_text(error)) from None


def _fields_read(schema: type[InstructionPayload], data: Mapping[str, str]) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    for name, field in schema().fields.items():
        if name in PAGE_SKIPS:
            continue
        if isinstance(field, serializers.BooleanField):
            raw = data.get(name) or ""
            payload[name] = CHECKBOX.get(raw.strip().lower(), raw)
            continue
        text = (data.get(name) or "").strip()
        if not text and not field.required:
            continue  # an empty optional box is no value
        payload[name] = _whole_number(text) if isinstance(field, serializers.IntegerField) else text
    return payload


def _whole_number(text: str) -> int | str:
    """A typed number as a number; anything else as typed, for the schema to refuse."""
    return int(text) if text.lstrip("+-").isdigit() and len(text) <= 20 else text


def _context_read(data: Mapping[str, str]) -> dict[str, Any]:
    """A free-form payload from one box: a JSON object as it is, any other text as a note."""
    raw = (data.get("context") or "").strip()
    if not raw:
        return {}
    parsed = _parse_json(raw)
    return parsed if isinstance(parsed, dict) and parsed else {"note": raw}
