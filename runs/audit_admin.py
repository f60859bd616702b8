"""The read-only base for audit rows in the Django admin."""

from typing import Any

from django.contrib import admin
from django.db import models
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

# Every field any audit admin hides (resume-token digests and sealed copies). Filtering on
# one would let a staff user probe its value through the query string, one prefix at a time.
HIDDEN_FIELDS: set[str] = set()


class ReadOnlyAdmin(admin.ModelAdmin):
    """Audit history: viewable, never added, changed or deleted from the admin."""

    hidden_fields: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        HIDDEN_FIELDS.update(cls.hidden_fields)

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

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # Refused on any hop, so `pause__token_digest` from another admin is refused too;
        # Django answers a refused lookup with 400 whatever the value, so nothing leaks.
        if HIDDEN_FIELDS.intersection(lookup.split(LOOKUP_SEP)):
            return False
        return super().lookup_allowed(lookup, value, request)
