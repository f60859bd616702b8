"""Where a tenant's OAuth sources come from: a row an admin edits in the Django admin, or
else the environment (HARBOR_OAUTH_SOURCES, a JSON list of objects with tenant, name,
display_name, client_id, client_secret, authorize_url, token_url, revoke_url?,
api_base_url?, scopes). A row wins over the environment for the same (tenant, name)."""

from dataclasses import dataclass

from django.conf import settings

from runs.models import Tenant

from .models import OAuthSource
from .sealing import Unsealable, seal, unseal


@dataclass(frozen=True)
class Source:
    name: str
    display_name: str
    client_id: str
    client_secret: str
    authorize_url: str
    token_url: str
    scopes: tuple[str, ...]
    revoke_url: str = ""
    api_base_url: str = ""


class SourceMissing(Exception):
    """No such source is configured for the tenant."""


def source_get(tenant: Tenant, name: str) -> Source:
    row = OAuthSource.objects.filter(tenant=tenant, name=name).first()
    if row is not None:
        try:
            secret = unseal(row.client_secret_sealed) if row.client_secret_sealed else ""
        except Unsealable:
            secret = ""  # sealed under a retired key: the exchange fails loudly (502), not here
        return Source(
            name=row.name,
            display_name=row.display_name,
            client_id=row.client_id,
            client_secret=secret,
            authorize_url=row.authorize_url,
            token_url=row.token_url,
            scopes=tuple(row.scopes.split()),
            revoke_url=row.revoke_url,
            api_base_url=row.api_base_url,
        )
    for entry in settings.HARBOR_OAUTH_SOURCES:
        if entry.get("tenant") == tenant.slug and entry.get("name") == name:
            scopes = entry.get("scopes", [])
            return Source(
                name=name,
                display_name=entry.get("display_name", name),
                client_id=entry["client_id"],
                client_secret=entry.get("client_secret", ""),
                authorize_url=entry["authorize_url"],
                token_url=entry["token_url"],
                scopes=tuple(scopes.split() if isinstance(scopes, str) else scopes),
                revoke_url=entry.get("revoke_url", ""),
                api_base_url=entry.get("api_base_url", ""),
            )
    raise SourceMissing(f"no OAuth source {name!r} is configured for tenant {tenant.slug}")


def source_save(tenant: Tenant, source: Source) -> OAuthSource:
    """Create or update a tenant's source row (the client secret sealed)."""
    row, _ = OAuthSource.objects.update_or_create(
        tenant=tenant,
        name=source.name,
        defaults={
            "display_name": source.display_name,
            "client_id": source.client_id,
            "client_secret_sealed": seal(source.client_secret),
            "authorize_url": source.authorize_url,
            "token_url": source.token_url,
            "revoke_url": source.revoke_url,
            "api_base_url": source.api_base_url,
            "scopes": " ".join(source.scopes),
        },
    )
    return row
