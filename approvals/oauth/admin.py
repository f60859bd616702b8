"""OAuth sources in the Django admin: a tenant admin enters the client secret, which is
sealed on save and never shown back (leave it empty to keep the stored one). Credentials
and flows are listed without their secrets."""

from typing import Any

from django import forms
from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from .models import OAuthCredential, OAuthFlow, OAuthSource
from .sealing import seal


def _formfield(field: models.Field, **kwargs: Any) -> forms.Field | None:
    if isinstance(field, models.URLField):
        kwargs.setdefault("assume_scheme", "https")
    return field.formfield(**kwargs)


class OAuthSourceForm(forms.ModelForm):
    client_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Write-only: stored encrypted, never shown. Leave empty to keep the current secret.",
    )

    class Meta:
        model = OAuthSource
        formfield_callback = _formfield
        fields = [
            "tenant",
            "name",
            "display_name",
            "client_id",
            "client_secret",
            "authorize_url",
            "token_url",
            "revoke_url",
            "api_base_url",
            "scopes",
        ]


@admin.register(OAuthSource)
class OAuthSourceAdmin(admin.ModelAdmin):
    form = OAuthSourceForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ["display_name", "name", "tenant", "client_id", "has_secret", "updated_at"]
    list_filter = ["tenant"]

    @admin.display(boolean=True, description="secret set")
    def has_secret(self, obj: OAuthSource) -> bool:
        return bool(obj.client_secret_sealed)

    def save_model(self, request: HttpRequest, obj: OAuthSource, form: Any, change: bool) -> None:
        if form.cleaned_data.get("client_secret"):
            obj.client_secret_sealed = seal(form.cleaned_data["client_secret"])
        super().save_model(request, obj, form, change)


@admin.register(OAuthCredential)
class OAuthCredentialAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "source_name", "scopes", "expires_at", "connected_at", "last_used_at"]
    list_filter = ["tenant", "source_name"]
    fields = readonly_fields = (
        "tenant",
        "user",
        "source_name",
        "scopes",
        "expires_at",
        "connected_at",
        "refreshed_at",
        "last_used_at",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(OAuthFlow)
class OAuthFlowAdmin(admin.ModelAdmin):
    list_display = ["id", "user", "tenant", "source_name", "created_at", "expires_at", "used_at", "outcome"]
    list_filter = ["tenant", "outcome"]
    fields = readonly_fields = (
        "tenant",
        "user",
        "run",
        "pause",
        "source_name",
        "scopes",
        "created_at",
        "expires_at",
        "used_at",
        "outcome",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
