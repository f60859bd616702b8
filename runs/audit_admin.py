"""The read-only base for audit rows in the Django admin."""

from django.contrib import admin
from django.db import models
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    """Audit history: viewable, never added, changed or deleted from the admin."""

    # Left off the page; never filterable either (harbor_site.admin_site.SECRET_COLUMNS).
    hidden_fields: tuple[str, ...] = ()

    def has_add_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: models.Model | None = None) -> list[str]:
        return [f.name for f in self.model._meta.fields if f.name not in self.hidden_fields]

    # The stubs type field groups as an invariant list of unions; a list of names is one.
    def get_fields(self, request: HttpRequest, obj: models.Model | None = None) -> list[str]:  # type: ignore[override]
        return self.get_readonly_fields(request, obj)
