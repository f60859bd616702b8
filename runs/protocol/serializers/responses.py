"""Response shapes of the /v1 protocol: every body a route returns is rendered by one of
these, so the OpenAPI document and the wire are the same classes."""

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from approvals.domain.selectors import pause_payload_shown
from approvals.models import Cause, Pause, PauseState, Reason
from runs.domain.tokens import token_unseal
from runs.models import CancelPolicy, Run, RunStatus, SteeringInstruction

PROTOCOL_VERSION = "0.1.0"
REDACTED = "<redacted>"


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    # payload_invalid on a tool's arguments: what is wrong with each one (PROTOCOL §7). The
    # metaclass takes declared fields out of the class, so this one does not hide `.fields`.
    fields = serializers.DictField(child=serializers.CharField(), required=False)  # type: ignore[assignment]


class StartResponseSerializer(serializers.Serializer):
    task_id = serializers.CharField()
    reused = serializers.BooleanField()
    protocol_version = serializers.CharField(default=PROTOCOL_VERSION)


class ControlResponseSerializer(serializers.Serializer):
    accepted = serializers.BooleanField(default=True)
    method = serializers.CharField()
    protocol_version = serializers.CharField(default=PROTOCOL_VERSION)


class PauseOwnerSerializer(serializers.Serializer):
    """The (tenant, user, session) that owned the run when it paused."""

    tenant = serializers.CharField(source="tenant.slug")
    user = serializers.CharField(source="identity_user")
    session = serializers.CharField(source="identity_session")


class PauseSnapshotSerializer(serializers.Serializer):
    """A pause as pause.list shows it. The resume token appears only for a caller the
    decision rule would accept (context `may_see_token`, from token_visibility)."""

    token = serializers.SerializerMethodField(help_text="The resume token (single use).")
    pause_id = serializers.CharField(source="pk")
    reason = serializers.ChoiceField(choices=Reason.values)
    cause = serializers.ChoiceField(choices=Cause.values)
    state = serializers.ChoiceField(choices=PauseState.values)
    identity = PauseOwnerSerializer(source="*")
    run = serializers.CharField(source="run_id")
    paused_at = serializers.DateTimeField(source="created_at")
    resumed_at = serializers.DateTimeField(source="decided_at", allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    decision = serializers.SerializerMethodField()
    payload = serializers.SerializerMethodField(help_text="The cause's own fields (a sign-in's only with the token).")

    def get_token(self, pause: Pause) -> str | None:
        may_see_token: Callable[[str], bool] = self.context["may_see_token"]
        return token_unseal(pause.token_sealed) if may_see_token(pause.pk) else None

    @extend_schema_field(serializers.DictField())
    def get_payload(self, pause: Pause) -> dict[str, Any]:
        may_see_token: Callable[[str], bool] = self.context["may_see_token"]
        return pause_payload_shown(pause, may_see_token(pause.pk))

    approvals = serializers.SerializerMethodField(
        help_text="(extension) Under an approval rule only: the rule, the approvals its quorum needs, and who has"
        " approved the current arguments."
    )

    def get_decision(self, pause: Pause) -> str | None:
        return pause.decision or None

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_approvals(self, pause: Pause) -> dict[str, Any] | None:
        tally = pause.approvals_so_far()
        return None if tally is None else {"rule": tally.rule, "required": tally.needed, "approved_by": tally.names}

    def to_representation(self, instance: Pause) -> dict[str, Any]:
        # A pause no rule governs keeps the protocol's snapshot, field for field.
        data: dict[str, Any] = super().to_representation(instance)
        if data.get("approvals") is None:
            data.pop("approvals", None)
        return data


class PageInfoSerializer(serializers.Serializer):
    """Reads a runs.domain.pagination.Page."""

    page = serializers.IntegerField()
    page_size = serializers.IntegerField()
    page_count = serializers.IntegerField()
    total_rows = serializers.IntegerField()


class PauseListResponseSerializer(PageInfoSerializer):
    snapshots = PauseSnapshotSerializer(many=True, source="rows")


class TaskErrorSerializer(serializers.Serializer):
    code = serializers.CharField(source="failure_code")
    message = serializers.CharField(source="failure_message")


class RunOwnerSerializer(serializers.Serializer):
    tenant = serializers.CharField(source="tenant.slug")
    user = serializers.CharField(source="owner.username")
    session = serializers.CharField()


class TaskRowSerializer(serializers.Serializer):
    task_id = serializers.CharField(source="pk")
    status = serializers.ChoiceField(choices=RunStatus.values)
    agent_id = serializers.CharField()
    query = serializers.SerializerMethodField()
    goal = serializers.CharField()
    priority = serializers.IntegerField()
    parent_task_id = serializers.CharField(source="parent_id", allow_null=True)
    cancel_policy = serializers.ChoiceField(choices=CancelPolicy.values)
    identity = RunOwnerSerializer(source="*")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    answer = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()

    def get_query(self, run: Run) -> str:
        return str((run.checkpoint or {}).get("query", run.goal))

    def get_answer(self, run: Run) -> str | None:
        return run.answer or None

    @extend_schema_field(TaskErrorSerializer(allow_null=True))
    def get_error(self, run: Run) -> dict | None:
        return TaskErrorSerializer(run).data if run.failure_code else None


class StatusCountsSerializer(serializers.Serializer):
    pending = serializers.IntegerField()
    running = serializers.IntegerField()
    paused = serializers.IntegerField()
    complete = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()


class TaskListResponseSerializer(PageInfoSerializer):
    """Reads a Page of runs; `counts` comes in the context."""

    tasks = TaskRowSerializer(many=True, source="rows")
    counts = serializers.SerializerMethodField()

    @extend_schema_field(StatusCountsSerializer)
    def get_counts(self, page: object) -> dict[str, int]:
        return StatusCountsSerializer(self.context["counts"]).data


class ActorSerializer(serializers.Serializer):
    user = serializers.CharField(source="actor.username")
    session = serializers.CharField(source="actor_session")


class SteeringRowSerializer(serializers.Serializer):
    method = serializers.CharField(source="instruction")
    payload = serializers.SerializerMethodField()
    event_id = serializers.CharField(allow_null=True)
    state = serializers.CharField()
    outcome = serializers.CharField(allow_blank=True)
    actor = ActorSerializer(source="*")
    created_at = serializers.DateTimeField()
    settled_at = serializers.DateTimeField(allow_null=True)

    def get_payload(self, instruction: SteeringInstruction) -> dict:
        payload = dict(instruction.payload)
        if "token" in payload:  # spent, but a token is shown only with its pause
            payload["token"] = REDACTED
        return payload


class TaskDetailSerializer(TaskRowSerializer):
    """Reads a run from approvals.domain.selectors.task_detail (its visible pauses and steering prefetched)."""

    pauses = PauseSnapshotSerializer(many=True, source="visible_pauses")
    steering = SteeringRowSerializer(many=True, source="steering_history")
