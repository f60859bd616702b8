from django.contrib import admin

from approvals.models import DecisionRefusal, Pause
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
    list_filter = ["tenant", "cause", "state", "decision", "decided_by"]
    search_fields = ["id", "run__id", "tool", "identity_user", "decided_by__username"]


@admin.register(DecisionRefusal)
class DecisionRefusalAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor_tenant", "actor_user", "actor_session", "address", "method", "code", "pause"]
    list_filter = ["actor_tenant", "code", "method"]
