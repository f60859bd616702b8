"""Request shapes of the /v1 protocol (PROTOCOL §2-§4), validated strictly; the same classes
describe the requests in the OpenAPI document. Domain rules (agents, priorities, the nine
payloads) stay in the services."""

from typing import Any

from rest_framework import serializers

from approvals.models import Cause, PauseState, Reason
from runs.domain.pagination import PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX
from runs.domain.payload import MAX_STRING
from runs.identity.scopes import SCOPE_NAMES
from runs.models import CancelPolicy, RunStatus

from .fields import (
    NonEmptyObjectField,
    ObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictDateTimeField,
    StrictIntegerField,
    TextField,
    id_field,
)

PAGE_MAX = 1_000_000


# --- Requests -------------------------------------------------------------------------------


class IdentitySerializer(serializers.Serializer):
    """Identity comes only from the verified token (and X-Harbor-Session). A body identity
    may repeat it; one that contradicts it is refused with 401 identity_required."""

    tenant = StrictCharField(required=False, max_length=50)
    user = StrictCharField(required=False, max_length=150)
    session = StrictCharField(required=False, max_length=128)


class RunIdentitySerializer(IdentitySerializer):
    run = id_field("The task id (run id) to act on.")
    scope = StrictChoiceField(
        choices=list(SCOPE_NAMES),
        required=False,
        help_text="Assert the steering scope the caller acts with; 403 identity_scope_required when it does not hold it.",
    )


class TaskIdentitySerializer(IdentitySerializer):
    run = id_field("The task id (run id).")


class StartRequestSerializer(serializers.Serializer):
    identity = IdentitySerializer()
    query = TextField(help_text="The run's goal, as the planner sees it.")
    agent_id = StrictCharField(required=False, max_length=64, help_text="deploy (default), countdown, tool_context, …")
    priority = StrictIntegerField(required=False, min_value=-1000, max_value=1000)
    idempotency_key = id_field(
        "A start with a key already used by the same (tenant, user, session) returns that run.", required=False
    )
    parent_run = id_field(
        "Start as a child of this run (cancels cascade unless cancel_policy is isolate).", required=False
    )
    cancel_policy = StrictChoiceField(choices=CancelPolicy.values, required=False)


class ControlRequestSerializer(serializers.Serializer):
    identity = RunIdentitySerializer()
    payload = ObjectField(required=False, help_text="The method's payload (see each method).")
    event_id = id_field(
        "A control with an event_id already applied to the run is acknowledged again and applied once.", required=False
    )


class PageSerializer(serializers.Serializer):
    identity = IdentitySerializer()
    # Bounded, so the row offset always fits the database's integers.
    page = StrictIntegerField(required=False, min_value=1, max_value=PAGE_MAX, default=1)
    page_size = StrictIntegerField(required=False, min_value=1, max_value=PAGE_SIZE_MAX, default=PAGE_SIZE_DEFAULT)


class FilterSerializer(serializers.Serializer):
    """A filter names only the keys it has: an unknown one (a misspelling, another list's
    key) would otherwise be dropped and the page come back unfiltered."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, dict) else []
        if unknown:
            raise serializers.ValidationError(f"unknown key {unknown[0][:64]!r}; known: {', '.join(self.fields)}")
        return super().to_internal_value(data)


class PauseFilterSerializer(FilterSerializer):
    status = StrictChoiceField(
        choices=[*PauseState.values, "any"], required=False, help_text="Default: paused (open pauses)."
    )
    run_ids = serializers.ListField(child=id_field("A run id."), required=False, max_length=50)
    reasons = serializers.ListField(child=StrictChoiceField(choices=Reason.values), required=False, max_length=50)
    causes = serializers.ListField(child=StrictChoiceField(choices=Cause.values), required=False, max_length=50)
    since = StrictDateTimeField(required=False, help_text="Paused at or after.")
    until = StrictDateTimeField(required=False, help_text="Paused before.")


class PauseListRequestSerializer(PageSerializer):
    filter = PauseFilterSerializer(required=False)


class TaskFilterSerializer(FilterSerializer):
    status = StrictChoiceField(choices=RunStatus.values, required=False)
    parent = id_field("Only the children of this run.", required=False)  # type: ignore[assignment]  # a field named like Field.parent


class TaskListRequestSerializer(PageSerializer):
    filter = TaskFilterSerializer(required=False)


class TaskGetRequestSerializer(serializers.Serializer):
    identity = TaskIdentitySerializer()


# --- Method payloads (documentation of PROTOCOL §3; the service validates them) ------------


class MethodPayload(serializers.Serializer):
    """A steering method's payload; `required_payload` says whether the method needs one."""

    required_payload = False


def resume_token_field() -> StrictCharField:
    """The optional token of approve, reject and resume."""
    return StrictCharField(
        required=False,
        min_length=1,
        max_length=MAX_STRING,
        help_text="The resume token (default: the run's open pause).",
    )


class CancelPayload(MethodPayload):
    hard = StrictBooleanField(required=False, help_text="Interrupt the step in flight.")


class EmptyPayload(MethodPayload):
    pass


class ResumePayload(MethodPayload):
    token = resume_token_field()
    input = serializers.JSONField(required=False, help_text="Answers an A2A input request.")


class ApprovePayload(MethodPayload):
    token = resume_token_field()
    reason = StrictCharField(required=False, max_length=MAX_STRING, allow_blank=True)
    args = ObjectField(required=False, help_text="Edited arguments, where the gate allows edits (extension).")


class RejectPayload(MethodPayload):
    token = resume_token_field()
    reason = StrictCharField(required=False, max_length=MAX_STRING, allow_blank=True)


class RedirectPayload(MethodPayload):
    required_payload = True
    goal = TextField(help_text="The run's new goal.")


class UserMessagePayload(MethodPayload):
    required_payload = True
    message = TextField()


class PrioritizePayload(MethodPayload):
    required_payload = True
    priority = StrictIntegerField(min_value=-1000, max_value=1000)


def control_request_serializer(method: str, payload: type[MethodPayload] | None) -> type[ControlRequestSerializer]:
    """A per-method request class, so the OpenAPI document shows each method's payload."""
    name = "".join(part.title() for part in method.split("_"))
    fields = {
        "payload": payload(required=payload.required_payload)
        if payload is not None
        else NonEmptyObjectField(help_text="Any non-empty object: appended to the context the planner sees.")
    }
    return type(f"{name}ControlRequest", (ControlRequestSerializer,), fields)
