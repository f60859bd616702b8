"""Request and response shapes of the /v1 protocol (PROTOCOL §2-§4).

Requests are validated strictly — JSON types are never coerced (`"5"` is not a page, `1` is
not a string) — and the same classes describe the API in the OpenAPI document, so the
published schema and the checks cannot drift apart. Domain rules (agents, priorities, the
nine payloads) stay in the services."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from approvals.models import Cause, PauseState, Reason
from runs.domain.pagination import PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX
from runs.identity.scopes import SCOPE_NAMES
from runs.models import CancelPolicy, RunStatus

PROTOCOL_VERSION = "0.1.0"
PAGE_MAX = 1_000_000


# --- Strict fields -------------------------------------------------------------------------


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "A JSON integer is required."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictChoiceField(serializers.ChoiceField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


class StrictDateTimeField(serializers.DateTimeField):
    def to_internal_value(self, value):
        if not isinstance(value, str):
            self.fail("invalid", format="ISO 8601")
        return super().to_internal_value(value)


class ObjectField(serializers.DictField):
    """Any JSON object (the bounds of PROTOCOL §3 are checked before parsing)."""

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("not_a_dict", input_type=type(data).__name__)
        return data


@extend_schema_field({"type": "object", "minProperties": 1, "additionalProperties": {}})
class NonEmptyObjectField(ObjectField):
    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        if not data:
            raise serializers.ValidationError("must be a non-empty object")
        return data


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": 4096, "pattern": r"\S"})
class TextField(StrictCharField):
    """A string with something in it besides whitespace."""

    def __init__(self, **kwargs):
        super().__init__(max_length=4096, **kwargs)


def _id(help_text: str, **kwargs) -> StrictCharField:
    return StrictCharField(max_length=200, min_length=1, help_text=help_text, **kwargs)


# --- Requests -------------------------------------------------------------------------------


class IdentitySerializer(serializers.Serializer):
    """Identity comes only from the verified token (and X-Harbor-Session). A body identity
    may repeat it; one that contradicts it is refused with 401 identity_required."""

    tenant = StrictCharField(required=False, max_length=50)
    user = StrictCharField(required=False, max_length=150)
    session = StrictCharField(required=False, max_length=128)


class RunIdentitySerializer(IdentitySerializer):
    run = _id("The task id (run id) to act on.")
    scope = StrictChoiceField(
        choices=list(SCOPE_NAMES),
        required=False,
        help_text="Assert the steering scope the caller acts with; 403 identity_scope_required when it does not hold it.",
    )


class TaskIdentitySerializer(IdentitySerializer):
    run = _id("The task id (run id).")


class StartRequestSerializer(serializers.Serializer):
    identity = IdentitySerializer(required=False)
    query = TextField(help_text="The run's goal, as the planner sees it.")
    agent_id = StrictCharField(required=False, max_length=64, help_text="deploy (default), countdown, tool_context, …")
    priority = StrictIntegerField(required=False, min_value=-1000, max_value=1000)
    idempotency_key = _id(
        "A start with a key already used by the same (tenant, user, session) returns that run.", required=False
    )
    parent_run = _id("Start as a child of this run (cancels cascade unless cancel_policy is isolate).", required=False)
    cancel_policy = StrictChoiceField(choices=CancelPolicy.values, required=False)


class ControlRequestSerializer(serializers.Serializer):
    identity = RunIdentitySerializer()
    payload = ObjectField(required=False, help_text="The method's payload (see each method).")
    event_id = _id(
        "A control with an event_id already applied to the run is acknowledged again and applied once.", required=False
    )


class PageSerializer(serializers.Serializer):
    identity = IdentitySerializer(required=False)
    # Bounded, so the row offset always fits the database's integers.
    page = StrictIntegerField(required=False, min_value=1, max_value=PAGE_MAX, default=1)
    page_size = StrictIntegerField(required=False, min_value=1, max_value=PAGE_SIZE_MAX, default=PAGE_SIZE_DEFAULT)


class PauseFilterSerializer(serializers.Serializer):
    status = StrictChoiceField(
        choices=[*PauseState.values, "any"], required=False, help_text="Default: paused (open pauses)."
    )
    run_ids = serializers.ListField(child=_id("A run id."), required=False, max_length=50)
    reasons = serializers.ListField(child=StrictChoiceField(choices=Reason.values), required=False, max_length=50)
    causes = serializers.ListField(child=StrictChoiceField(choices=Cause.values), required=False, max_length=50)
    since = StrictDateTimeField(required=False, help_text="Paused at or after.")
    until = StrictDateTimeField(required=False, help_text="Paused before.")


class PauseListRequestSerializer(PageSerializer):
    filter = PauseFilterSerializer(required=False)


class TaskFilterSerializer(serializers.Serializer):
    status = StrictChoiceField(choices=RunStatus.values, required=False)
    parent = _id("Only the children of this run.", required=False)


class TaskListRequestSerializer(PageSerializer):
    filter = TaskFilterSerializer(required=False)


class TaskGetRequestSerializer(serializers.Serializer):
    identity = TaskIdentitySerializer()


# --- Method payloads (documentation of PROTOCOL §3; the service validates them) ------------


class CancelPayload(serializers.Serializer):
    required_payload = False
    hard = StrictBooleanField(required=False, help_text="Interrupt the step in flight.")


class EmptyPayload(serializers.Serializer):
    required_payload = False


class ResumePayload(serializers.Serializer):
    required_payload = False
    token = StrictCharField(
        required=False, min_length=1, max_length=4096, help_text="The resume token (default: the run's open pause)."
    )
    input = serializers.JSONField(required=False, help_text="Answers an A2A input request.")


class ApprovePayload(serializers.Serializer):
    required_payload = False
    token = StrictCharField(
        required=False, min_length=1, max_length=4096, help_text="The resume token (default: the run's open pause)."
    )
    reason = StrictCharField(required=False, max_length=4096, allow_blank=True)
    args = ObjectField(required=False, help_text="Edited arguments, where the gate allows edits (extension).")


class RejectPayload(serializers.Serializer):
    required_payload = False
    token = StrictCharField(
        required=False, min_length=1, max_length=4096, help_text="The resume token (default: the run's open pause)."
    )
    reason = StrictCharField(required=False, max_length=4096, allow_blank=True)


class RedirectPayload(serializers.Serializer):
    required_payload = True
    goal = TextField(help_text="The run's new goal.")


class UserMessagePayload(serializers.Serializer):
    required_payload = True
    message = TextField()


class PrioritizePayload(serializers.Serializer):
    required_payload = True
    priority = StrictIntegerField(min_value=-1000, max_value=1000)


def control_request_serializer(method: str, payload: type[serializers.Serializer] | None):
    """A per-method request class, so the OpenAPI document shows each method's payload."""
    name = "".join(part.title() for part in method.split("_"))
    fields = {
        "payload": payload(required=payload.required_payload)
        if payload is not None
        else NonEmptyObjectField(help_text="Any non-empty object: appended to the context the planner sees.")
    }
    return type(f"{name}ControlRequest", (ControlRequestSerializer,), fields)


# --- Responses ------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class StartResponseSerializer(serializers.Serializer):
    task_id = serializers.CharField()
    reused = serializers.BooleanField()
    protocol_version = serializers.CharField()


class ControlResponseSerializer(serializers.Serializer):
    accepted = serializers.BooleanField()
    method = serializers.CharField()
    protocol_version = serializers.CharField()


class TripleSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    user = serializers.CharField()
    session = serializers.CharField()


class PauseSnapshotSerializer(serializers.Serializer):
    token = serializers.CharField(allow_null=True, help_text="The resume token (single use).")
    pause_id = serializers.CharField()
    reason = serializers.ChoiceField(choices=Reason.values)
    cause = serializers.ChoiceField(choices=Cause.values)
    state = serializers.ChoiceField(choices=PauseState.values)
    identity = TripleSerializer()
    run = serializers.CharField()
    paused_at = serializers.DateTimeField()
    resumed_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    decision = serializers.CharField(allow_null=True)
    payload = serializers.DictField()


class PageInfoSerializer(serializers.Serializer):
    page = serializers.IntegerField()
    page_size = serializers.IntegerField()
    page_count = serializers.IntegerField()
    total_rows = serializers.IntegerField()


class PauseListResponseSerializer(PageInfoSerializer):
    snapshots = PauseSnapshotSerializer(many=True)


class TaskErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class TaskRowSerializer(serializers.Serializer):
    task_id = serializers.CharField()
    status = serializers.ChoiceField(choices=RunStatus.values)
    agent_id = serializers.CharField()
    query = serializers.CharField()
    goal = serializers.CharField()
    priority = serializers.IntegerField()
    parent_task_id = serializers.CharField(allow_null=True)
    cancel_policy = serializers.ChoiceField(choices=CancelPolicy.values)
    identity = TripleSerializer()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    answer = serializers.CharField(allow_null=True)
    error = TaskErrorSerializer(allow_null=True)


class StatusCountsSerializer(serializers.Serializer):
    pending = serializers.IntegerField()
    running = serializers.IntegerField()
    paused = serializers.IntegerField()
    complete = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()


class TaskListResponseSerializer(PageInfoSerializer):
    tasks = TaskRowSerializer(many=True)
    counts = StatusCountsSerializer()


class ActorSerializer(serializers.Serializer):
    user = serializers.CharField()
    session = serializers.CharField()


class SteeringRowSerializer(serializers.Serializer):
    method = serializers.CharField()
    payload = serializers.DictField()
    event_id = serializers.CharField(allow_null=True)
    state = serializers.CharField()
    outcome = serializers.CharField(allow_blank=True)
    actor = ActorSerializer()
    created_at = serializers.DateTimeField()
    settled_at = serializers.DateTimeField(allow_null=True)


class TaskDetailSerializer(TaskRowSerializer):
    pauses = PauseSnapshotSerializer(many=True)
    steering = SteeringRowSerializer(many=True)
