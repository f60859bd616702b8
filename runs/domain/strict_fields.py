"""Strict JSON fields: JSON types are never coerced (`"5"` is not a page, `1` is not a string).
The protocol's requests and the steering payloads (runs.domain.instruction_payloads) share them."""

from datetime import datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from runs.domain.payload import MAX_STRING

# --- Strict fields -------------------------------------------------------------------------


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "A JSON integer is required."}

    def to_internal_value(self, data: object) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data: object) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictChoiceField(serializers.ChoiceField):
    def to_internal_value(self, data: object) -> Any:
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


class StrictDateTimeField(serializers.DateTimeField):
    def to_internal_value(self, value: object) -> datetime:
        if not isinstance(value, str):
            self.fail("invalid", format="ISO 8601")
        return super().to_internal_value(value)


class ObjectField(serializers.DictField):
    """Any JSON object (the bounds of PROTOCOL §3 are checked before parsing)."""

    def to_internal_value(self, data: object) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("not_a_dict", input_type=type(data).__name__)
        return data


@extend_schema_field({"type": "object", "minProperties": 1, "additionalProperties": {}})
class NonEmptyObjectField(ObjectField):
    def to_internal_value(self, data: object) -> dict[str, Any]:
        data = super().to_internal_value(data)
        if not data:
            raise serializers.ValidationError("must be a non-empty object")
        return data


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": MAX_STRING, "pattern": r"\S"})
class TextField(StrictCharField):
    """A string with something in it besides whitespace."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=MAX_STRING, **kwargs)

    def to_internal_value(self, data: object) -> str:
        text = super().to_internal_value(data)
        if not text.strip():  # kept as sent (trim_whitespace=False) yet still nothing in it
            self.fail("blank")
        return text


def id_field(help_text: str, **kwargs: Any) -> StrictCharField:
    """An id as sent: never trimmed, so an id of whitespace is simply unknown (404), as the
    document's `minLength: 1` lets a client send it."""
    return StrictCharField(max_length=200, min_length=1, trim_whitespace=False, help_text=help_text, **kwargs)
