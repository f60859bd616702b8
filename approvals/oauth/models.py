"""OAuth sources per tenant, credentials per (tenant, person, source), and sign-in flows.
Imported by approvals.models, so they belong to the approvals app."""

from django.conf import settings
from django.db import models

from runs.kernel.ids import new_ulid
from runs.models import Run, Tenant


class OAuthSource(models.Model):
    """An authorization server a tenant's tools may ask people to connect. The client secret
    is sealed (approvals.oauth.sealing) and never shown back."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    name = models.SlugField(max_length=50, help_text="What tools ask for, e.g. 'calendar'.")
    display_name = models.CharField(max_length=100, help_text="What people see: 'Sign in to <display name>'.")
    client_id = models.CharField(max_length=200)
    client_secret_sealed = models.TextField(blank=True, editable=False)
    authorize_url = models.URLField(max_length=500)
    token_url = models.URLField(max_length=500)
    revoke_url = models.URLField(max_length=500, blank=True)
    api_base_url = models.URLField(max_length=500, blank=True)
    scopes = models.CharField(max_length=500, help_text="Space-separated.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "approvals"
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="oauth_source_unique_name")]
        verbose_name = "OAuth source"

    def __str__(self) -> str:
        return f"{self.display_name} ({self.tenant.slug}/{self.name})"


class OAuthCredential(models.Model):
    """A person's tokens for one source, sealed: access and refresh token, type and expiry."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    source_name = models.SlugField(max_length=50)
    sealed = models.TextField(editable=False)
    scopes = models.CharField(max_length=500, blank=True)
    # When the access token expires (shown on the Connected accounts page; not a secret).
    expires_at = models.DateTimeField(null=True, blank=True)
    connected_at = models.DateTimeField(auto_now_add=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "approvals"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user", "source_name"], name="oauth_credential_unique")
        ]
        verbose_name = "OAuth credential"

    def __str__(self) -> str:
        return f"{self.source_name} credential of {self.user}"


class OAuthFlow(models.Model):
    """One sign-in in progress, created with the pause it releases. The `state` is kept
    only as a keyed digest, the PKCE verifier only sealed; a flow is used at most once."""

    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    # One pause may see several flows: a sign-in that expired is started again (a new state).
    pause = models.ForeignKey("approvals.Pause", on_delete=models.CASCADE, related_name="oauth_flows")
    source_name = models.SlugField(max_length=50)
    state_digest = models.CharField(max_length=64, unique=True, editable=False)
    verifier_sealed = models.TextField(editable=False)
    redirect_uri = models.URLField(max_length=500)
    scopes = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=32, blank=True)

    class Meta:
        app_label = "approvals"
        verbose_name = "OAuth sign-in flow"

    def __str__(self) -> str:
        return f"{self.source_name} sign-in for {self.user} ({self.outcome or 'open'})"
