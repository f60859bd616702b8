"""The read-only base for audit rows in the Django admin."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Audit history: viewable, never added, changed or deleted from the admin."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields if f.name not in self.hidden_fields]

    def get_fields(self, request, obj=None):
        return self.get_readonly_fields(request, obj)

    hidden_fields: tuple[str, ...] = ()
