"""The payload of each steering instruction (PROTOCOL §3), written once as a serializer: it
checks the wire and the page forms alike (a breach is 422 payload_invalid) and is the
payload's schema in the OpenAPI document. Only the fields a method uses are kept."""

from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from runs.domain.payload import MAX_STRING, check_bounds
from runs.domain.strict_fields import ObjectField, StrictBooleanField, StrictCharField, StrictIntegerField, TextField
from runs.kernel.errors import HarborError, InvalidRequest, PayloadInvalid

PRIORITY_RANGE = range(-1000, 1001)


class InstructionPayload(serializers.Serializer):
    """A steering instruction's payload."""

    required_payload: ClassVar[bool] = False  # a request must carry one
    free_form: ClassVar[bool] = False  # any non-empty object, with no fields of its own


def resume_token_field() -> StrictCharField:
    """The optional token of approve, reject and resume."""
    return StrictCharField(
        required=False,
        min_length=1,
        max_length=MAX_STRING,
        trim_whitespace=False,
        help_text="The resume token (default: the run's open pause).",
    )


def reason_field() -> StrictCharField:
    return StrictCharField(required=False, max_length=MAX_STRING, allow_blank=True, trim_whitespace=False)


class CancelPayload(InstructionPayload):
    """cancel: stop at the next step boundary; with `hard`, interrupt the step in flight."""

    hard = StrictBooleanField(required=False, default=False, help_text="Interrupt the step in flight.")


class PausePayload(InstructionPayload):
    """pause: none."""


class DecisionPayload(InstructionPayload):
    """A decision (approve, reject, resume) of the pause its token names, or the run's open one."""

    # Edited arguments belong to an approve, an answer to a resume: on another decision they
    # would be dropped unseen, so they are refused.
    OWNERS: ClassVar[dict[str, str]] = {"args": "approve", "input": "resume"}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            for name, owner in self.OWNERS.items():
                if name not in self.fields and data.get(name) is not None:
                    raise serializers.ValidationError({name: [f"may only accompany {owner}"]})
        return super().to_internal_value(data)


class ResumePayload(DecisionPayload):
    """resume: a pause that is not an approval gate; `input` answers a remote agent."""

    token = resume_token_field()
    reason = reason_field()
    input = serializers.JSONField(required=False, help_text="Answers an A2A input request.")


class ApprovePayload(DecisionPayload):
    """approve: clear an approval gate, with edited `args` where the gate allows them."""

    token = resume_token_field()
    reason = reason_field()
    args = ObjectField(
        required=False, allow_null=True, help_text="Edited arguments, where the gate allows edits (extension)."
    )


class RejectPayload(DecisionPayload):
    """reject: deny an approval gate; the gated call never runs and the run fails."""

    token = resume_token_field()
    reason = reason_field()


class RedirectPayload(InstructionPayload):
    """redirect: replace the run's goal."""

    required_payload = True
    goal = TextField(
        trim_whitespace=False,
        help_text="The run's new goal.",
        error_messages={"blank": "Give the new goal to redirect the run to."},
    )


@extend_schema_field({"type": "object", "minProperties": 1, "additionalProperties": {}})
class InjectContextPayload(InstructionPayload):
    """Any non-empty object: appended to the context the planner sees."""

    required_payload = True
    free_form = True

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict) or not data:
            raise serializers.ValidationError(
                {api_settings.NON_FIELD_ERRORS_KEY: ["the payload must be a non-empty object"]}
            )
        return data


class UserMessagePayload(InstructionPayload):
    """user_message: an in-band message from the user to the run."""

    required_payload = True
    message = TextField(trim_whitespace=False, error_messages={"blank": "Write the message to send to the run."})


class PrioritizePayload(InstructionPayload):
    """prioritize: the run's new scheduling priority."""

    required_payload = True
    priority = StrictIntegerField(min_value=PRIORITY_RANGE.start, max_value=PRIORITY_RANGE.stop - 1)


def payload_clean(schema: type[InstructionPayload], payload: object) -> dict[str, Any]:
    """`payload` checked against the bounds of PROTOCOL §3, then its instruction's schema: the
    fields it uses (a field sent as null is left out; a free-form payload is kept whole), or
    PayloadInvalid naming each field's error."""
    check_bounds(payload)
    serializer = schema(data=payload)
    if not serializer.is_valid():
        raise PayloadInvalid(errors_text(serializer.errors))
    if schema.free_form:
        return dict(serializer.validated_data)
    return {name: value for name, value in serializer.validated_data.items() if value is not None}


def errors_text(errors: object) -> str:
    """A serializer's errors in one line, field by field: `goal: Give the new goal …`."""
    if isinstance(errors, dict):
        return "; ".join(
            errors_text(value) if key == api_settings.NON_FIELD_ERRORS_KEY else f"{key}: {errors_text(value)}"
            for key, value in errors.items()
        )
    if isinstance(errors, list):
        return " ".join(errors_text(item) for item in errors)
    return str(errors)


def priority_check(priority: object, *, error: type[HarborError] = InvalidRequest) -> None:
    # start's priority is a body field (400); prioritize's is a payload rule (422).
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITY_RANGE:
        raise error(f"priority must be an integer from {PRIORITY_RANGE.start} to {PRIORITY_RANGE.stop - 1}")
