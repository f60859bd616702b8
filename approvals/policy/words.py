"""Policies in plain words, for `harbor_policy check/show`: which calls a rule covers and
what it asks for, e.g. `production deploys: deploy_to_production when environment is
production: 2 approvals from release-managers, never the requester, a reason to reject`."""

import json
from typing import Any

import cedarpy

from approvals.policy.rules import ApprovalRule

_COMPARISONS = {"==": "is", "!=": "is not", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def rule_words(rule: ApprovalRule) -> str:
    """What a rule asks for."""
    approvals = f"{rule.quorum} approval{'s' if rule.quorum > 1 else ''}"
    parts = [f"{approvals} from {rule.approvers or 'any approver'}"]
    parts.append("the requester may approve" if rule.requester_may_approve else "never the requester")
    reasons = {"reject": "a reason to reject", "approve": "a reason to approve", "both": "a reason either way"}
    if rule.reason_required in reasons:
        parts.append(reasons[rule.reason_required])
    if rule.remind_minutes:
        parts.append(f"a reminder after {rule.remind_minutes} min")
    if rule.escalate_to:
        parts.append(f"escalated to {rule.escalate_to} after {rule.escalate_minutes} min")
    if rule.deadline_minutes:
        parts.append(f"times out after {rule.deadline_minutes} min")
    return ", ".join(parts)


def scope_words(policy: dict[str, Any]) -> str:
    """Which calls a policy (Cedar's JSON form) covers: its tool, requester and conditions."""
    resource = policy.get("resource", {})
    tool = _entity_words(resource) if resource.get("op") != "All" else "any tool"
    principal = policy.get("principal", {})
    if principal.get("op") == "==":
        tool += f" asked by {principal['entity']['id']}"
    elif principal.get("op") == "in":
        tool += f" asked by a member of {principal['entity']['id']}"
    conditions = []
    for condition in policy.get("conditions", []):
        text = _condition_words(condition["body"])
        conditions.append(text if condition["kind"] == "when" else f"unless {text}")
    return f"{tool} when {' and '.join(conditions)}" if conditions else tool


def _entity_words(scope: dict[str, Any]) -> str:
    if "entity" in scope:
        return str(scope["entity"]["id"])
    if "entities" in scope:
        return " or ".join(str(e["id"]) for e in scope["entities"])
    return str(scope.get("entity_type", "any tool"))


def _condition_words(body: dict[str, Any]) -> str:
    try:
        return _words(body)
    except _NoWords:
        return _cedar_text(body)


class _NoWords(Exception):
    pass


def _words(node: dict[str, Any]) -> str:
    ((op, arg),) = node.items()
    if op == "&&":
        # `arguments has x && arguments.x == …`: the guard is Cedar's, not the reader's.
        parts = [p for p in (_words(arg["left"]), _words(arg["right"])) if p]
        return " and ".join(parts)
    if op == "has":
        return ""
    if op == "||":
        return f"({_words(arg['left'])} or {_words(arg['right'])})"
    if op in _COMPARISONS:
        return f"{_words(arg['left'])} {_COMPARISONS[op]} {_words(arg['right'])}"
    if op == "!":
        return f"not ({_words(arg['arg'])})"
    if op == "in" and arg["left"] == {"Var": "principal"}:
        return f"the requester is in {_words(arg['right'])}"
    if op == "Value":
        if isinstance(arg, dict) and "__entity" in arg:
            return str(arg["__entity"]["id"])
        return json.dumps(arg) if not isinstance(arg, str) else arg
    if op == "Var":
        return {"principal": "the requester", "resource": "the tool"}.get(arg, str(arg))
    if op == "." and arg["left"] in ({"Var": "context"}, {".": {"left": {"Var": "context"}, "attr": "arguments"}}):
        return str(arg["attr"])
    raise _NoWords(op)


def _cedar_text(body: dict[str, Any]) -> str:
    """A condition in Cedar's own syntax, when words would not say it better."""
    wrapped = {
        "staticPolicies": {
            "p": {
                "effect": "permit",
                "principal": {"op": "All"},
                "action": {"op": "All"},
                "resource": {"op": "All"},
                "conditions": [{"kind": "when", "body": body}],
            }
        },
        "templates": {},
        "templateLinks": [],
    }
    text = cedarpy.policies_from_json_str(json.dumps(wrapped))
    return text.split("when {", 1)[1].rsplit("}", 1)[0].strip()
