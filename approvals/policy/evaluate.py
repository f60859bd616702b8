"""Which rule governs a gated call: Cedar's answer to `Action::"require_approval"` under the
tenant's policy in force.

- a `permit` matched: approval is needed under that rule (several: the strictest);
- a `forbid` matched: no approval is needed (Cedar's forbid overrides any permit);
- no policy, or nothing matched: the protocol's defaults (the tool's own approval setting,
  and PROTOCOL §4's decision rights).

Each answer names the policy version, and the rule that decided."""

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import cedarpy

from approvals.models import ApprovalPolicy, ApproverGroup
from approvals.policy.rules import ApprovalRule, strictest
from approvals.policy.schema import ACTION, NAMESPACE
from approvals.policy.validate import CheckedPolicy, policy_read
from runs.models import Tenant


@dataclass(frozen=True)
class ApprovalGate:
    """The call needs approval under `rule`, from the policy's `version`."""

    rule: ApprovalRule
    version: int

    @property
    def rule_name(self) -> str:
        return self.rule.name


@dataclass(frozen=True)
class ApprovalWaived:
    """A forbid named `rule_name` matched: the call needs no approval."""

    rule_name: str
    version: int


@dataclass(frozen=True)
class ProtocolDefaults:
    """No policy says anything about this call (`version` None: the tenant has none)."""

    version: int | None = None
    rule_name: None = None


PolicyOutcome = ApprovalGate | ApprovalWaived | ProtocolDefaults

_I64 = 1 << 63


def approval_rule_for(
    *, tenant: Tenant, tool: str, arguments: Mapping[str, Any], requester: str, agent: str
) -> PolicyOutcome:
    """The rule for `requester` (a username) calling `tool` with `arguments` in `agent`'s run."""
    latest = (
        ApprovalPolicy.objects.filter(tenant=tenant).order_by("-version").values_list("pk", "version", "created_at")
    )
    active = latest.first()
    if active is None:
        return ProtocolDefaults()
    pk, version, created_at = active
    policies, checked = _compiled(tenant.pk, version, created_at, pk)
    groups = sorted(
        ApproverGroup.objects.filter(tenant=tenant, members__username=requester).values_list("name", flat=True)
    )
    request = {
        "principal": {"type": f"{NAMESPACE}::User", "id": requester},
        "action": {"type": f"{NAMESPACE}::Action", "id": ACTION},
        "resource": {"type": f"{NAMESPACE}::Tool", "id": tool},
        "context": {"agent": agent, "arguments": _comparable(arguments)},
    }
    result = cedarpy.is_authorized(request, policies, _entities(requester, groups, tool, agent))
    matched = result.diagnostics.reasons
    if result.decision == cedarpy.Decision.Deny and matched:
        forbids = checked.forbids()
        return ApprovalWaived(rule_name=min(forbids[p] for p in matched), version=version)
    if result.decision == cedarpy.Decision.Allow:
        permits = checked.permits()
        return ApprovalGate(rule=strictest([permits[p] for p in matched]), version=version)
    return ProtocolDefaults(version=version)


def _entities(requester: str, groups: list[str], tool: str, agent: str) -> list[dict[str, Any]]:
    def uid(kind: str, name: str) -> dict[str, str]:
        return {"type": f"{NAMESPACE}::{kind}", "id": name}

    return [
        {"uid": uid("User", requester), "attrs": {}, "parents": [uid("Group", g) for g in groups]},
        *({"uid": uid("Group", g), "attrs": {}, "parents": []} for g in groups),
        {"uid": uid("Tool", tool), "attrs": {}, "parents": []},
        {"uid": uid("Agent", agent), "attrs": {}, "parents": []},
    ]


def _comparable(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a policy can name: strings, whole numbers Cedar can hold, and booleans
    (the schema's types). Others (lists, objects, decimals) are left out, as no rule can
    compare them."""
    return {
        name: value
        for name, value in arguments.items()
        if isinstance(value, str | bool) or (isinstance(value, int) and -_I64 <= value < _I64)
    }


# Parsed policy sets, per (tenant, version): a version never changes, so an entry never goes
# stale; a new version is a new key. The row's id and time tell apart versions of databases
# that reuse the same numbers (a test's, say).
_cache: dict[tuple[int, int, datetime, int], tuple[cedarpy.PolicySet, CheckedPolicy]] = {}
_cache_lock = threading.Lock()
_CACHE_SIZE = 256


def _compiled(tenant_id: int, version: int, created_at: datetime, pk: int) -> tuple[cedarpy.PolicySet, CheckedPolicy]:
    key = (tenant_id, version, created_at, pk)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    source = ApprovalPolicy.objects.values_list("source", flat=True).get(pk=pk)
    compiled = (cedarpy.PolicySet.from_str(source), policy_read(source))
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:
            _cache.clear()  # many tenants changing policies at once: start over rather than grow
        _cache[key] = compiled
    return compiled
