"""The outbox table: side effects owed after a commit, written in the transaction that owes
them and delivered after it (outbox.delivery)."""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from runs.kernel.ids import new_ulid

ERROR_LIMIT = 2000  # characters of a failure kept: enough to read, never a whole response body
KEY_LIMIT = 200


class State(models.TextChoices):
    PENDING = "pending"  # due at next_attempt_at (or in flight, until its lease runs out)
    DELIVERED = "delivered"
    DEAD = "dead"  # gave up: kept for a person to read and redeliver from the admin


class OutboxMessage(models.Model):
    # The id is made here, not by the database: a write whose answer was lost can be looked up.
    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    kind = models.CharField(max_length=64, help_text="Which handler delivers it.")
    key = models.CharField(
        max_length=KEY_LIMIT, help_text="Idempotency key: one message per kind and key, handed to every attempt."
    )
    payload = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # Pending: when it is next due. Claimed: the end of the deliverer's lease, so a message
    # whose deliverer died comes back by itself.
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=ERROR_LIMIT, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "key"], name="outbox_kind_key")]
        # The deliverer's look: due pending messages in order. Delivered and dead ones, the
        # bulk of the table over time, are not in it.
        indexes = [models.Index(fields=["next_attempt_at", "id"], condition=Q(state="pending"), name="outbox_due")]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} ({self.state})"
