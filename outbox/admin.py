"""The outbox in the admin: what is owed, what was delivered, and the dead letters, which a
person with the change permission can send again. Nothing is edited here."""

import json

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from outbox.models import OutboxMessage
from outbox.writer import redeliver
from runs.audit_admin import ReadOnlyAdmin


class HasErrorFilter(admin.SimpleListFilter):
    title = "last error"
    parameter_name = "has_error"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "With an error"), ("no", "Without")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.exclude(last_error="")
        if self.value() == "no":
            return queryset.filter(last_error="")
        return queryset


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "key", "state", "attempts", "next_attempt_at", "short_error", "created_at"]
    list_filter = ["state", "kind", "attempts", "next_attempt_at", HasErrorFilter]
    search_fields = ["id", "key", "last_error"]
    ordering = ["-created_at", "-id"]
    actions = ["redeliver_dead"]

    def get_readonly_fields(self, request: HttpRequest, obj: OutboxMessage | None = None) -> list[str]:  # type: ignore[override]  # ReadOnlyAdmin's obj is any model
        return [name if name != "payload" else "payload_shown" for name in super().get_readonly_fields(request, obj)]

    @admin.display(description="payload")
    def payload_shown(self, message: OutboxMessage) -> str:
        return format_html("<pre>{}</pre>", json.dumps(message.payload, indent=2, sort_keys=True))

    @admin.display(description="last error")
    def short_error(self, message: OutboxMessage) -> str:
        return message.last_error[:80] + ("…" if len(message.last_error) > 80 else "")

    @admin.action(description="Redeliver the selected dead messages", permissions=["redeliver"])
    def redeliver_dead(self, request: HttpRequest, queryset: QuerySet[OutboxMessage]) -> None:
        count = redeliver(queryset.values_list("pk", flat=True))
        skipped = queryset.count() - count
        self.message_user(request, f"{count} message(s) put back to pending.", messages.SUCCESS)
        if skipped > 0:
            self.message_user(
                request, f"{skipped} message(s) were not dead and were left as they are.", messages.WARNING
            )

    def has_redeliver_permission(self, request: HttpRequest) -> bool:
        # The rows stay read-only; sending a dead letter again is the change a person may make.
        return request.user.has_perm("outbox.change_outboxmessage")
