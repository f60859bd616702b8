"""The credential store: a person's tokens per (tenant, source), sealed at rest. Reading
one refreshes an expired access token with its refresh token; a credential that can no
longer be used (refresh refused, sealed under a retired key) is removed, so the next tool
call asks the person to sign in again."""

from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from runs.models import Tenant

from . import client
from .models import OAuthCredential
from .sealing import Unsealable, seal, unseal
from .sources import Source

# An access token this close to its expiry is refreshed before use.
EXPIRY_MARGIN = timedelta(seconds=30)


def _sealed_fields(token: dict, previous: dict | None = None) -> dict[str, Any]:
    """A checked token answer (client's: token_answer.checked_token) as a credential's fields."""
    expires_at = token["expires_at"]
    kept = {
        "access_token": token["access_token"],
        "token_type": token["token_type"],
        # A refresh response may omit the refresh token: the old one still holds.
        "refresh_token": token["refresh_token"] or (previous or {}).get("refresh_token", ""),
        "expires_at": expires_at,
    }
    shown = datetime.fromtimestamp(expires_at, tz=UTC) if expires_at is not None else None
    return {"sealed": seal(kept), "expires_at": shown, "scopes": token["scope"]}


def credential_store(*, tenant: Tenant, user: User, source: Source, token: dict) -> OAuthCredential:
    """Keep (or replace) a person's tokens for a source, from a token response."""
    credential, _ = OAuthCredential.objects.update_or_create(
        tenant=tenant, user=user, source_name=source.name, defaults={**_sealed_fields(token), "refreshed_at": None}
    )
    return credential


def credential_list(*, tenant: Tenant, user: User) -> list[OAuthCredential]:
    return list(OAuthCredential.objects.filter(tenant=tenant, user=user).order_by("source_name"))


def credential_revoke(*, tenant: Tenant, user: User, source: Source | None, source_name: str) -> bool:
    """Forget a person's credential (and ask the provider to revoke its tokens)."""
    credential = OAuthCredential.objects.filter(tenant=tenant, user=user, source_name=source_name).first()
    if credential is None:
        return False
    credential.delete()
    if source is not None:
        try:
            tokens = unseal(credential.sealed)
        except Unsealable:
            return True
        for token in (tokens.get("refresh_token"), tokens.get("access_token")):
            if token:
                client.revoke(source, token)
    return True


def access_token(*, tenant: Tenant, user: User, source: Source, force_refresh: bool = False) -> str | None:
    """A usable access token, refreshed if it has expired; None when the person must sign
    in (no credential, or one the provider no longer honours). ProviderDown propagates.

    No lock is held across the provider call (on SQLite a write lock would stall every
    writer): the refreshed tokens replace the old ones only if nobody replaced them first,
    and a refresh that loses that race uses the winner's tokens."""
    credential = OAuthCredential.objects.filter(tenant=tenant, user=user, source_name=source.name).first()
    if credential is None:
        return None
    try:
        tokens = unseal(credential.sealed)
    except Unsealable:
        credential.delete()
        return None
    expires_at = tokens.get("expires_at")
    expired = expires_at is not None and expires_at <= (timezone.now() + EXPIRY_MARGIN).timestamp()
    now = timezone.now()
    if not (expired or force_refresh):
        OAuthCredential.objects.filter(pk=credential.pk).update(last_used_at=now)
        return tokens["access_token"]
    try:
        if not tokens.get("refresh_token"):
            raise client.ProviderRefused("no refresh token")
        fresh = client.refresh(source, tokens["refresh_token"])
    except client.ProviderRefused:
        if _replaced(credential):
            return access_token(tenant=tenant, user=user, source=source)
        OAuthCredential.objects.filter(pk=credential.pk, sealed=credential.sealed).delete()
        return None
    fields = {**_sealed_fields(fresh, tokens), "refreshed_at": now, "last_used_at": now}
    if not OAuthCredential.objects.filter(pk=credential.pk, sealed=credential.sealed).update(**fields):
        return access_token(tenant=tenant, user=user, source=source)  # refreshed (or revoked) meanwhile
    return unseal(fields["sealed"])["access_token"]


def _replaced(credential: OAuthCredential) -> bool:
    return OAuthCredential.objects.filter(pk=credential.pk).exclude(sealed=credential.sealed).exists()
