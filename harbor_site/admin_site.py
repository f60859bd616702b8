"""The admin site: Django's, with every ModelAdmin registered on it (ours, auth's, axes's)
refusing query-string lookups that touch a secret column.

A changelist filters on whatever its query string names: any field of its own model
(`?state_digest__startswith=ab`) and any field behind a relation in `list_filter`
(`?decided_by__password__startswith=`). On a column kept secret a staff user could read
it one prefix at a time. Refused on any hop of the lookup, Django answers 400 whatever the
value, so nothing leaks. Search, filters and columns never name a secret column either
(tests/test_admin_secrets.py walks every registered ModelAdmin)."""

from typing import Any

from django.contrib import admin
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

from runs.domain.tokens import SIGN_IN_SEALED

# Every column (or JSON key) that holds a secret, a digest of one or a sealed copy: resume
# tokens, a sign-in's state and PKCE verifier, OAuth client secrets and credentials, an A2A
# agent's Authorization header and a credential answered to it, password hashes, sessions.
SECRET_COLUMNS = frozenset(
    {
        "token_digest",
        "token_sealed",
        SIGN_IN_SEALED,
        "state_digest",
        "verifier_sealed",
        "client_secret_sealed",
        "sealed",
        "auth_sealed",
        "password",
        "session_key",
        "session_data",
    }
)


def names_secret(lookup: str) -> bool:
    return not SECRET_COLUMNS.isdisjoint(lookup.split(LOOKUP_SEP))


class SecretColumnsGuard(admin.ModelAdmin):
    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        if names_secret(lookup):
            return False
        return super().lookup_allowed(lookup, value, request)


class HarborAdminSite(admin.AdminSite):
    def register(self, model_or_iterable: Any, admin_class: Any = None, **options: Any) -> None:
        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, SecretColumnsGuard):
            admin_class = type(
                admin_class.__name__, (SecretColumnsGuard, admin_class), {"__module__": admin_class.__module__}
            )
        super().register(model_or_iterable, admin_class, **options)
