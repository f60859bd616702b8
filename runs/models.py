from django.conf import settings
from django.contrib.auth.models import User
from django.db import models
from django.db.models import Q
from django.db.models.signals import pre_save
from django.dispatch import receiver
from django.utils import timezone

from runs.kernel.audit import AppendOnlyModel
from runs.kernel.errors import AuthRejected
from runs.kernel.ids import new_ulid
from runs.kernel.names import NAMESPACE_SEPARATOR, name_normalise


class Tenant(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    # The tenant's event cursor: incremented under the row lock, so sequences are strictly
    # increasing in commit order (an autoincrement id is not, under concurrent commits).
    event_sequence = models.BigIntegerField(default=0, editable=False)

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    MEMBER = "member"
    APPROVER = "approver"
    OPERATOR = "operator"
    ADMIN = "admin"


class Membership(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="one_membership_per_tenant")]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


@receiver(pre_save, sender=settings.AUTH_USER_MODEL)
def _username_normalised(sender: type[User], instance: User, **kwargs: object) -> None:
    """Accounts made in the admin or a shell get the same normal form as sign-in and tokens
    use, so `Alice` and `alice` can never be two accounts. Names normalisation refuses
    (look-alikes) are left as typed: such an account can neither sign in nor be named by
    a token. Namespaced names (`issuer/name`) are already normal."""
    if instance.username and NAMESPACE_SEPARATOR not in instance.username:
        try:
            instance.username = name_normalise(instance.username)
        except AuthRejected:
            pass


class RunStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETE = "complete"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_RUN_STATUSES = frozenset({RunStatus.COMPLETE, RunStatus.FAILED, RunStatus.CANCELLED})
LIVE_RUN_STATUSES = frozenset({RunStatus.PENDING, RunStatus.RUNNING, RunStatus.PAUSED})

# The one table of allowed run transitions; services refuse anything else.
RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.PENDING: frozenset({RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.RUNNING: frozenset({RunStatus.PAUSED, RunStatus.COMPLETE, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.PAUSED: frozenset({RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.COMPLETE: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}


class CancelPolicy(models.TextChoices):
    CASCADE = "cascade"
    ISOLATE = "isolate"


class FailureCode(models.TextChoices):
    CONSTRAINTS_CONFLICT = "constraints_conflict"
    TOOL_CONTEXT_LOST = "tool_context_lost"
    RUNTIME_ERROR = "runtime_error"
    REMOTE_AGENT = "remote_agent"  # a remote agent (A2A) failed the call: too slow, too large, refused


class RunQuerySet(models.QuerySet["Run"]):
    def locked(self) -> "RunQuerySet":
        """Under their row locks (PostgreSQL: FOR NO KEY UPDATE of the runs alone, so rows
        pointing at them still insert; SQLite: the immediate transaction holds the database),
        with the tenant and owner their events name."""
        return self.select_for_update(no_key=True, of=("self",)).select_related("tenant", "owner")


class Run(models.Model):
    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    # Keys that lead a composite index below get no index of their own (db_index=False):
    # every write would keep both up to date, for no read the composite does not serve.
    # Nor does a key no read asks for alone: a person's runs are read within a tenant
    # (run_tenant_owner_age); an index on the owner alone would serve only deleting a user,
    # which PROTECT refuses after one scan.
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="runs", db_index=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs", db_index=False)
    session = models.CharField(max_length=128)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.PENDING)
    agent_id = models.CharField(max_length=64)
    goal = models.TextField()
    priority = models.IntegerField(default=0)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    cancel_policy = models.CharField(max_length=8, choices=CancelPolicy.choices, default=CancelPolicy.CASCADE)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    # What the planner sees beside the goal: steering appends here at step boundaries.
    context = models.JSONField(default=list, blank=True)
    messages = models.JSONField(default=list, blank=True)
    # The run loop's durable state: step counter, history and the tool context of a park.
    checkpoint = models.JSONField(default=dict, blank=True)
    answer = models.TextField(blank=True)
    failure_code = models.CharField(max_length=32, choices=FailureCode.choices, blank=True)
    failure_message = models.TextField(blank=True)
    # Set while steering waits for the next step boundary (cheap check for the run loop).
    steering_pending = models.BooleanField(default=False)
    hard_cancel = models.BooleanField(default=False)
    # Only the lease holder advances the run; an expired lease means its worker died.
    lease_owner = models.CharField(max_length=64, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # When the run last became ready for a step (started, decided, or its last step done):
    # ready runs are taken by priority, then by this, so a run that just had a step waits
    # behind the others.
    queued_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "status", "-created_at"], name="run_tenant_status_age"),
            models.Index(fields=["tenant", "-created_at"], name="run_tenant_age"),
            models.Index(fields=["tenant", "owner", "-created_at"], name="run_tenant_owner_age"),
            # Ready runs in dispatch order, and only those: the dispatcher's look walks it in
            # order and stops at its LIMIT, so the history of ended runs never enters it.
            models.Index(
                fields=["-priority", "queued_at"],
                condition=Q(status__in=[RunStatus.PENDING, RunStatus.RUNNING]),
                name="run_ready_order",
            ),
            # The few runs a worker holds: a tenant's share of workers is counted from these.
            models.Index(fields=["tenant", "lease_expires_at"], condition=~Q(lease_owner=""), name="run_leased"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "owner", "session", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="run_idempotency_per_identity",
            ),
        ]
        permissions = [("steer_run", "Steer the run as if its owner")]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.id}"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_RUN_STATUSES


class Instruction(models.TextChoices):
    """The nine steering instructions: a closed set (a new verb is a protocol change)."""

    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"
    APPROVE = "approve"
    REJECT = "reject"
    REDIRECT = "redirect"
    INJECT_CONTEXT = "inject_context"
    USER_MESSAGE = "user_message"
    PRIORITIZE = "prioritize"


# The three instructions that decide a pause; they apply at once, even to a finished run.
DECISION_INSTRUCTIONS = frozenset({Instruction.APPROVE, Instruction.REJECT, Instruction.RESUME})


class SteeringState(models.TextChoices):
    PENDING = "pending"
    APPLIED = "applied"
    REJECTED = "rejected"


class SteeringInstruction(AppendOnlyModel):
    """Audit of every steering instruction; the run loop applies pending ones in order."""

    # Made by the application, so a request whose answer was lost can look for what it wrote.
    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    # Read by run; the tenant and the actor alone are read by no one (see Run.owner).
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="steering")
    instruction = models.CharField(max_length=16, choices=Instruction.choices)
    payload = models.JSONField(default=dict, blank=True)
    event_id = models.CharField(max_length=200, null=True, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False)
    actor_session = models.CharField(max_length=128)
    state = models.CharField(max_length=16, choices=SteeringState.choices, default=SteeringState.PENDING)
    outcome = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)  # one clock with settled_at
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "event_id"], condition=Q(event_id__isnull=False), name="steering_event_id_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instruction} on {self.run_id} by {self.actor}"


class Event(AppendOnlyModel):
    """The durable event log (PROTOCOL §5 envelope)."""

    # Both keys lead a composite index of Meta (see Run.tenant).
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    # Given as the transaction that wrote the event commits (runs.domain.events): no reader
    # ever sees it empty, hence read as an int.
    sequence: "models.BigIntegerField[int | None, int]" = models.BigIntegerField(null=True)  # type: ignore[misc]
    type = models.CharField(max_length=64)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events", db_index=False)
    user = models.CharField(max_length=150)
    session = models.CharField(max_length=128)
    payload = models.JSONField(default=dict)
    occurred_at = models.DateTimeField()

    class Meta:
        ordering = ["tenant_id", "sequence"]
        constraints = [models.UniqueConstraint(fields=["tenant", "sequence"], name="event_sequence_per_tenant")]
        indexes = [models.Index(fields=["run", "sequence"])]

    def __str__(self) -> str:
        return f"#{self.sequence} {self.type}"


class ToolCallOutcome(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    PAUSED = "paused"  # the tool signalled a pause (OAuth sign-in, a remote agent's question)
    INTERRUPTED = "interrupted"  # a hard cancel stopped it
    LOST = "lost"  # its worker died (its lease expired) before it finished
    FENCED = "fenced"  # it finished after its worker had lost the lease: not recorded
    DEFERRED = "deferred"  # it could not start yet (a bound on calls in flight was full): runs again later


class ToolCall(AppendOnlyModel):
    """The tool-call ledger: one row per execution of a tool body. Exactly-once is checkable:
    a step has one `completed` row; a second attempt exists only after a `lost` one. The key
    is made by the worker before it writes the row, and the row is settled by (run, step,
    attempt): never by an id that came back in an answer that may be lost."""

    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)  # see Run.owner
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="tool_calls", db_index=False)  # see Run.tenant
    step = models.IntegerField()
    attempt = models.PositiveIntegerField()
    tool = models.CharField(max_length=64)
    worker = models.CharField(max_length=64)
    # Handed to the tool: stable across attempts of one step, so outside side effects can
    # be de-duplicated (as an Idempotency-Key header is).
    idempotency_key = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16, choices=ToolCallOutcome.choices, default=ToolCallOutcome.RUNNING)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "step", "attempt"]
        constraints = [models.UniqueConstraint(fields=["run", "step", "attempt"], name="tool_call_attempt_once")]

    def __str__(self) -> str:
        return f"{self.tool} step {self.step} attempt {self.attempt} ({self.outcome})"

    @property
    def duration_seconds(self) -> float | None:
        return (self.finished_at - self.started_at).total_seconds() if self.finished_at else None
