from django.contrib import admin
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from runs.audit_admin import ReadOnlyAdmin
from runs.identity.permissions import membership_grant, membership_revoke
from runs.models import Event, Membership, Run, SteeringInstruction, Tenant, ToolCall


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    can_delete = False
    readonly_fields = ["user", "role", "created_at"]

    def has_add_permission(self, request: HttpRequest, obj: Tenant | None = None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name"]
    readonly_fields = ["event_sequence"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    """Memberships go through the service, so role groups (and the object permissions
    they carry) follow every change."""

    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["tenant", "role"]
    search_fields = ["user__username"]

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> list[str]:
        return ["tenant", "user"] if obj else []

    def save_model(self, request: HttpRequest, obj: Membership, form: ModelForm, change: bool) -> None:
        saved = membership_grant(tenant=obj.tenant, user=obj.user, role=obj.role)
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        membership_revoke(tenant=obj.tenant, user=obj.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        for membership in queryset:
            membership_revoke(tenant=membership.tenant, user=membership.user)


def changelist_link(model: str, label: str, **filters: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    return format_html('<a href="{}?{}">{}</a>', reverse(f"admin:{model}_changelist"), query, label)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "agent_id", "owner", "status", "priority", "created_at", "audit_links"]
    list_filter = ["tenant", "status", "agent_id", "owner"]
    search_fields = ["id", "goal", "owner__username"]
    readonly_fields = ["audit_links"]

    def get_readonly_fields(self, request: HttpRequest, obj: Run | None = None) -> list[str]:  # type: ignore[override]  # ReadOnlyAdmin's obj is any model
        return ["audit_links", *super().get_readonly_fields(request, obj)]

    @admin.display(description="audit")
    def audit_links(self, run: Run) -> str:
        return format_html(
            "{} · {} · {} · {}",
            changelist_link("approvals_pause", f"pauses ({run.pauses.count()})", run__id__exact=run.pk),
            changelist_link("runs_event", f"events ({run.events.count()})", run__id__exact=run.pk),
            changelist_link("runs_steeringinstruction", f"steering ({run.steering.count()})", run__id__exact=run.pk),
            changelist_link("runs_toolcall", f"tool calls ({run.tool_calls.count()})", run__id__exact=run.pk),
        )


@admin.register(SteeringInstruction)
class SteeringInstructionAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "run", "instruction", "actor", "actor_session", "state", "created_at"]
    list_filter = ["tenant", "instruction", "state", "actor"]
    search_fields = ["run__id", "actor__username", "event_id"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["sequence", "tenant", "type", "run", "user", "session", "occurred_at"]
    list_filter = ["tenant", "type"]
    search_fields = ["run__id", "type", "user"]


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    """The tool-call ledger: exactly-once, checkable. One `completed` row per step; a second
    attempt only after its first was `lost` (its worker died)."""

    list_display = ["run", "step", "attempt", "tool", "outcome", "worker", "started_at", "finished_at"]
    list_filter = ["tenant", "outcome", "tool"]
    search_fields = ["run__id", "worker", "idempotency_key"]
