from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from approvals.domain.records import records_csv, records_json, records_of
from approvals.models import Approval, ApprovalPolicy, ApproverGroup, DecisionRefusal, Pause
from approvals.policy import PolicyInvalid, policy_check, policy_save
from approvals.policy.tool_arguments import tool_argument_schemas
from runs.application.catalog import tools_offered
from runs.audit_admin import ReadOnlyAdmin


@admin.register(Pause)
class PauseAdmin(ReadOnlyAdmin):
    """Every pause and its decision: who decided, for whom, when and why. The token is
    never shown (the database holds no usable copy of it anyway)."""

    hidden_fields = ("token_digest", "token_sealed")
    list_display = [
        "id",
        "tenant",
        "run",
        "cause",
        "reason",
        "tool",
        "state",
        "decision",
        "decided_by",
        "on_behalf_of",
        "created_at",
        "decided_at",
    ]
    list_filter = ["tenant", "cause", "state", "decision", "decided_by", "tool"]
    search_fields = ["id", "run__id", "tool", "identity_user", "decided_by__username", "decision_reason"]
    date_hierarchy = "created_at"
    actions = ["export_csv", "export_json"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Pause]:
        return (
            super()
            .get_queryset(request)
            .select_related("tenant", "decided_by")
            .prefetch_related("refusals", "approvals__actor")
        )

    @admin.action(description="Export the selected decision records as CSV")
    def export_csv(self, request: HttpRequest, queryset: QuerySet[Pause]) -> HttpResponse:
        return _download(records_csv(records_of(queryset)), "text/csv", "pauses.csv")

    @admin.action(description="Export the selected decision records as JSON")
    def export_json(self, request: HttpRequest, queryset: QuerySet[Pause]) -> HttpResponse:
        return _download(records_json(records_of(queryset)), "application/json", "pauses.json")


def _download(body: str, content_type: str, name: str) -> HttpResponse:
    response = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    """Each approval counted toward a rule's quorum, with the exact arguments it approved."""

    list_display = ["created_at", "pause", "actor", "actor_session", "fingerprint", "reason"]
    list_filter = ["actor"]
    search_fields = ["pause__id", "actor__username", "fingerprint"]


@admin.register(DecisionRefusal)
class DecisionRefusalAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor_tenant", "actor_user", "actor_session", "address", "method", "code", "pause"]
    list_filter = ["actor_tenant", "code", "method"]


class ApproverGroupForm(forms.ModelForm):
    class Meta:
        model = ApproverGroup
        fields = ["tenant", "name", "members"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant, members = cleaned.get("tenant"), cleaned.get("members")
        if tenant and members:
            # A group decides for its tenant only: its members are the tenant's people.
            outsiders = members.exclude(memberships__tenant=tenant).values_list("username", flat=True)
            if outsiders:
                self.add_error("members", f"not members of {tenant.slug}: {', '.join(sorted(outsiders))}")
        return cleaned


@admin.register(ApproverGroup)
class ApproverGroupAdmin(admin.ModelAdmin):
    """The groups approval policies name (`@approvers("release-managers")`)."""

    form = ApproverGroupForm
    list_display = ["name", "tenant", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "members__username"]
    filter_horizontal = ["members"]


class ApprovalPolicyForm(forms.ModelForm):
    """A new version: checked as `policy_save` checks it, the validator's words on the form."""

    class Meta:
        model = ApprovalPolicy
        fields = ["tenant", "source", "note"]
        widgets = {"source": forms.Textarea(attrs={"rows": 24, "cols": 100, "spellcheck": "false"})}

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant, source = cleaned.get("tenant"), cleaned.get("source")
        if tenant and source:
            groups = set(ApproverGroup.objects.filter(tenant=tenant).values_list("name", flat=True))
            try:
                policy_check(source, tool_schemas=tool_argument_schemas(tools_offered()), group_names=groups)
            except PolicyInvalid as invalid:
                self.add_error("source", invalid.messages)
        return cleaned


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(admin.ModelAdmin):
    """Policy versions: added (a new version, its author the admin), never changed or
    deleted. The latest of a tenant is in force."""

    form = ApprovalPolicyForm
    list_display = ["tenant", "version", "author", "created_at", "note"]
    list_filter = ["tenant"]
    search_fields = ["note", "author__username"]

    def has_change_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: models.Model | None = None) -> list[str]:
        return ["tenant", "version", "author", "created_at", "note", "source"] if obj else []

    def save_form(self, request: HttpRequest, form: forms.ModelForm, change: bool) -> ApprovalPolicy:
        # The version is numbered, and written, by the one service that saves policies.
        assert isinstance(request.user, User)
        return policy_save(
            tenant=form.cleaned_data["tenant"],
            source=form.cleaned_data["source"],
            author=request.user,
            note=form.cleaned_data.get("note", ""),
            tool_schemas=tool_argument_schemas(tools_offered()),
        )

    def save_model(self, request: HttpRequest, obj: ApprovalPolicy, form: forms.ModelForm, change: bool) -> None:
        pass  # saved by save_form

    def save_related(self, request: HttpRequest, form: forms.ModelForm, formsets: Any, change: bool) -> None:
        pass  # a version has no related rows to save
