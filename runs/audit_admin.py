"""The read-only base for audit rows in the Django admin."""

from django.contrib import admin
from django.db.models.constants import LOOKUP_SEP

# Every field any audit admin hides (resume-token digests and sealed copies). Filtering on
# one would let a staff user probe its value through the query string, one prefix at a time.
HIDDEN_FIELDS: set[str] = set()


class ReadOnlyAdmin(admin.ModelAdmin):
    """Audit history: viewable, never added, changed or deleted from the admin."""

    hidden_fields: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        HIDDEN_FIELDS.update(cls.hidden_fields)

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

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        # Refused on any hop, so `pause__token_digest` from another admin is refused too;
        # Django answers a refused lookup with 400 whatever the value, so nothing leaks.
        if HIDDEN_FIELDS.intersection(lookup.split(LOOKUP_SEP)):
            return False
        return super().lookup_allowed(lookup, value, request)
