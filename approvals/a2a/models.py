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


class RemoteCallSlot(models.Model):
    """One remote call in flight, counted against a bound (a tenant's, an agent host's):
    numbered 0 .. bound-1, so the unique key keeps the count at the bound across every worker
    process. A slot whose holder died lapses at `expires_at`; a live holder renews it."""

    scope = models.CharField(max_length=300)  # "tenant:<id>" or "peer:<host>:<port>"
    number = models.PositiveSmallIntegerField()
    holder = models.CharField(max_length=32)
    expires_at = models.DateTimeField()

    class Meta:
        app_label = "approvals"
        constraints = [models.UniqueConstraint(fields=["scope", "number"], name="approvals_remote_call_slot_unique")]
        indexes = [models.Index(fields=["holder"], name="approvals_remote_slot_holder")]
