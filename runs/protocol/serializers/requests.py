"""Request shapes of the /v1 protocol (PROTOCOL §2-§4), validated strictly; the same classes
describe the requests in the OpenAPI document. Domain rules (agents, priorities, the nine
payloads) stay in the services; each payload's schema is its instruction's spec's."""

from typing import Any

from rest_framework import serializers

from approvals.models import Cause, PauseState, Reason
from runs.domain.instructions import InstructionSpec
from runs.domain.pagination import PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX
from runs.domain.strict_fields import (
    ObjectField,
    StrictCharField,
    StrictChoiceField,
    StrictDateTimeField,
    StrictIntegerField,
    TextField,
    id_field,
)
from runs.identity.scopes import SCOPE_NAMES
from runs.models import CancelPolicy, RunStatus

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


# --- Method payloads (each the one its spec names: runs.domain.instructions) ----------------


def control_request_serializer(spec: InstructionSpec) -> type[ControlRequestSerializer]:
    """A per-method request class for the OpenAPI document, its payload the spec's schema.
    Requests are checked by ControlRequestSerializer; the payload by the service, against
    the same schema."""
    name = "".join(part.title() for part in spec.name.split("_"))
    fields = {"payload": spec.payload(required=spec.payload.required_payload)}
    return type(f"{name}ControlRequest", (ControlRequestSerializer,), fields)
