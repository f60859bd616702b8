from dataclasses import dataclass

from django.conf import settings
from django.db import models

from runs.kernel.audit import AppendOnlyModel
from runs.kernel.ids import new_ulid
from runs.models import Run, Tenant


class Cause(models.TextChoices):
    HITL_APPROVAL = "hitl_approval"
    TOOL_OAUTH = "tool_oauth"
    A2A = "a2a"
    OPERATOR = "operator"


class Reason(models.TextChoices):
    """Harbor's pause reasons, carried beside the cause on every pause."""

    APPROVAL_REQUIRED = "approval_required"
    EXTERNAL_EVENT = "external_event"
    AWAIT_INPUT = "await_input"


class PauseState(models.TextChoices):
    PAUSED = "paused"
    RESUMED = "resumed"


class Decision(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"
    RESUME = "resume"
    TIMEOUT = "timeout"
    CANCEL = "cancel"


# Decisions that end the run instead of driving it back to life.
TERMINAL_DECISIONS = frozenset({Decision.REJECT, Decision.TIMEOUT, Decision.CANCEL})


class Pause(AppendOnlyModel):
    """The one pause primitive. Created open, decided exactly once, never altered after."""

    id = models.CharField(primary_key=True, max_length=26, default=new_ulid, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)  # see Run.tenant
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="pauses")
    cause = models.CharField(max_length=16, choices=Cause.choices)
    reason = models.CharField(max_length=32, choices=Reason.choices)
    state = models.CharField(max_length=16, choices=PauseState.choices, default=PauseState.PAUSED)
    # HMAC-SHA256 of the resume token under a server key: the database never holds a
    # usable token, and a copy of it cannot be turned back into one.
    token_digest = models.CharField(max_length=64, unique=True, editable=False)
    token_sealed = models.TextField(editable=False)
    # The (tenant, user, session) that owned the run when it parked.
    identity_user = models.CharField(max_length=150)
    identity_session = models.CharField(max_length=128)
    tool = models.CharField(max_length=64, blank=True)
    step = models.IntegerField(default=0)
    payload = models.JSONField(default=dict, blank=True)
    # The serializable half of the tool context, and the keys of its live handles.
    tool_context = models.JSONField(default=dict, blank=True)
    handle_keys = models.JSONField(default=dict, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    decision = models.CharField(max_length=16, choices=Decision.choices, blank=True)
    decided_by = models.ForeignKey(  # no index: read by no one alone (see Run.owner)
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    decided_session = models.CharField(max_length=128, blank=True)
    on_behalf_of = models.CharField(max_length=300, blank=True)
    decision_reason = models.TextField(blank=True)
    decision_input = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    # The approval rule that governed the gate (approvals.policy; its fields, name included)
    # and the policy version it came from: empty when no policy said anything.
    policy_version = models.PositiveIntegerField(null=True, blank=True)
    policy_rule = models.JSONField(default=dict, blank=True)
    # SHA-256 of the gate's current arguments (payload "Args"): approvals count only on it.
    args_fingerprint = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # The reads of runs.identity.visibility: a page of a tenant's pauses by state and
        # age, narrowed by the pausing user or the cause, never the whole history.
        indexes = [
            models.Index(fields=["tenant", "state", "-created_at"], name="pause_tenant_state_age"),
            models.Index(fields=["tenant", "-created_at"], name="pause_tenant_age"),
            models.Index(fields=["tenant", "identity_user", "state", "-created_at"], name="pause_tenant_user_age"),
            models.Index(fields=["tenant", "state", "-decided_at"], name="pause_tenant_decided"),
            models.Index(fields=["state", "expires_at"]),
        ]
        permissions = [("decide_pause", "Decide the pause as a delegated approver")]

    def __str__(self) -> str:
        return f"{self.cause} pause {self.id}"

    @property
    def is_open(self) -> bool:
        return self.state == PauseState.PAUSED

    def approvals_so_far(self) -> "ApprovalTally | None":
        """Under a rule: who has approved the current arguments, of how many needed."""
        if not self.policy_rule:
            return None
        names = list(
            self.approvals.filter(fingerprint=self.args_fingerprint)
            .order_by("created_at")
            .values_list("actor__username", flat=True)
        )
        return ApprovalTally(
            rule=str(self.policy_rule.get("name", "")), needed=int(self.policy_rule.get("quorum", 1)), names=names
        )


@dataclass(frozen=True)
class ApprovalTally:
    rule: str
    needed: int
    names: list[str]

    def __str__(self) -> str:
        who = f": {', '.join(self.names)}" if self.names else ""
        return f"{len(self.names)} of {self.needed} approval{'s' if self.needed > 1 else ''}{who}"


class Approval(AppendOnlyModel):
    """One person's approval of a gate's exact arguments (their fingerprint), under a rule
    that needs several. A gate clears when enough people approved the same arguments."""

    pause = models.ForeignKey(Pause, on_delete=models.PROTECT, related_name="approvals", db_index=False)
    actor = models.ForeignKey(  # no index: read through the pause (see Run.owner)
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    actor_session = models.CharField(max_length=128)
    fingerprint = models.CharField(max_length=64)
    arguments = models.JSONField(default=dict)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pause", "created_at"]
        # Also the pause's index: the tally reads a pause's approvals of one fingerprint.
        constraints = [
            models.UniqueConstraint(fields=["pause", "fingerprint", "actor"], name="approval_once_per_actor_and_args")
        ]

    def __str__(self) -> str:
        return f"approval of pause {self.pause_id}"


class DecisionRefusal(AppendOnlyModel):
    """Audit of a refused decision (wrong, foreign or unknown token; no permission)."""

    actor_tenant = models.CharField(max_length=50)
    actor_user = models.CharField(max_length=150)
    actor_session = models.CharField(max_length=128)
    address = models.GenericIPAddressField(null=True, blank=True)
    pause = models.ForeignKey(Pause, null=True, blank=True, on_delete=models.PROTECT, related_name="refusals")
    method = models.CharField(max_length=16)
    code = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["actor_tenant", "actor_user", "created_at"]),
            # The refusal throttle's per-address ceiling (runs.protocol.throttle.DecisionRefusalThrottle).
            models.Index(fields=["address", "created_at"], name="approvals_refusal_addr_idx"),
        ]


class ApproverGroup(models.Model):
    """A named set of a tenant's people that an approval policy's rules name
    (`@approvers("release-managers")`)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approver_groups", db_index=False)
    name = models.SlugField(max_length=64, db_index=False)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="approver_groups")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "name"]
        # Also the tenant's index: every read names the tenant first.
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="approver_group_name_per_tenant")]

    def __str__(self) -> str:
        return self.name


class ApprovalPolicy(AppendOnlyModel):
    """One version of a tenant's approval policy (Cedar source, approvals.policy). Versions
    are never edited: a change is a new version, and the latest is the one in force."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="approval_policies", db_index=False)
    version = models.PositiveIntegerField()
    source = models.TextField()
    author = models.ForeignKey(  # no index: read by no one alone (see Run.owner)
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    note = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "-version"]
        verbose_name_plural = "approval policies"
        # Also the tenant's index, newest version first as the active one is read.
        constraints = [models.UniqueConstraint(fields=["tenant", "version"], name="approval_policy_version_per_tenant")]

    def __str__(self) -> str:
        return f"version {self.version}"
