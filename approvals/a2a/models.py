"""Remote A2A agents a tenant's runs may delegate to, configured by an admin."""

from django.db import models

from runs.models import Tenant

from .sealing import seal, unseal


class RemoteAgent(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    name = models.SlugField(max_length=64, help_text="What a run calls the agent by, e.g. travel-desk.")
    card_url = models.URLField(
        max_length=500,
        help_text="The agent's base URL (its card is read at /.well-known/agent-card.json) or its card's URL.",
    )
    # The Authorization header sent to the agent, encrypted at rest; never shown again.
    auth_sealed = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "approvals"
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="approvals_remote_agent_unique_name")]
        ordering = ["tenant", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.card_url})"

    @property
    def auth_header(self) -> str:
        return unseal(self.auth_sealed)

    def set_auth_header(self, value: str) -> None:
        self.auth_sealed = seal(value)
