"""Who may decide under a rule, beyond PROTOCOL §4's decision rights (which still apply: a
rule narrows who decides, it never lets in someone the protocol keeps out)."""

from django.contrib.auth.models import User

from approvals.models import ApproverGroup
from approvals.policy.rules import ApprovalRule
from runs.models import Tenant


def decision_refusal(rule: ApprovalRule, *, tenant: Tenant, person: User, requester: str) -> str | None:
    """Why `person` may not decide a call `requester` (a username) asked for under `rule`, in
    plain words; None when she may. The caller names the rule (`rule.name`) beside it."""
    if person.get_username() == requester and not rule.requester_may_approve:
        return "the person who asked for this call may not approve it"
    if rule.approvers and not ApproverGroup.objects.filter(tenant=tenant, name=rule.approvers, members=person).exists():
        return f"only members of {rule.approvers} may decide"
    return None
