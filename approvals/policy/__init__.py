"""Approval policy as code, per tenant: Cedar policies that say which gated calls need whose
approval, how many, with what reason and by when (docs/adr/0010).

The pause core asks `approval_rule_for` when a call is gated and `decision_refusal` when
someone decides; `policy_save` writes a new version. A tenant with no policy, or a call no
policy matches, keeps the protocol's defaults (PROTOCOL §4)."""

from approvals.policy.eligibility import decision_refusal
from approvals.policy.evaluate import ApprovalGate, ApprovalWaived, PolicyOutcome, ProtocolDefaults, approval_rule_for
from approvals.policy.fingerprint import arguments_fingerprint
from approvals.policy.rules import ApprovalRule
from approvals.policy.validate import CheckedPolicy, PolicyInvalid, policy_check
from approvals.policy.versions import policy_active, policy_save

__all__ = [
    "ApprovalGate",
    "ApprovalRule",
    "ApprovalWaived",
    "CheckedPolicy",
    "PolicyInvalid",
    "PolicyOutcome",
    "ProtocolDefaults",
    "approval_rule_for",
    "arguments_fingerprint",
    "decision_refusal",
    "policy_active",
    "policy_check",
    "policy_save",
]
