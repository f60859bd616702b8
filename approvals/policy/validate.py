"""Reading and checking a policy's source: Cedar's parser and validator (against the schema of
the tools' arguments), then the rules' annotations and the groups they name. Every problem is
reported at once, in the validator's words, each naming its rule."""

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import cedarpy

from approvals.policy.rules import ApprovalRule, RuleInvalid, forbid_name, rule_read
from approvals.policy.schema import argument_types, policy_schema
from approvals.policy.words import rule_words, scope_words


class PolicyInvalid(ValueError):
    """A policy that cannot be saved; `messages` says why, one problem each."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = messages


@dataclass(frozen=True)
class PolicyEntry:
    policy_id: str  # Cedar's own id for it (`policy0`, …), what a decision's reasons name
    effect: Literal["permit", "forbid"]
    name: str
    rule: ApprovalRule | None  # a permit's; a forbid has none
    scope: str  # which calls it covers, in plain words

    def words(self) -> str:
        asks = rule_words(self.rule) if self.rule else "no approval needed"
        return f"{self.name}: {self.scope}: {asks}"


@dataclass(frozen=True)
class CheckedPolicy:
    entries: tuple[PolicyEntry, ...]

    def permits(self) -> dict[str, ApprovalRule]:
        return {e.policy_id: e.rule for e in self.entries if e.rule is not None}

    def forbids(self) -> dict[str, str]:
        return {e.policy_id: e.name for e in self.entries if e.effect == "forbid"}

    def groups(self) -> set[str]:
        return {g for rule in self.permits().values() for g in rule.groups()}


def policy_read(source: str) -> CheckedPolicy:
    """The policies of a source and their rules, parsed but not checked against the tools (a
    stored version was checked when it was saved). Raises PolicyInvalid."""
    entries, errors = _entries(_parsed(source))
    if errors:
        raise PolicyInvalid(errors)
    return CheckedPolicy(entries)


def policy_check(
    source: str,
    *,
    tool_schemas: Mapping[str, Mapping[str, Any] | None],
    group_names: Collection[str] | None = None,
) -> CheckedPolicy:
    """A policy checked as saving checks it: valid Cedar, valid against the schema of these
    tools' arguments, valid annotations, and (given the tenant's `group_names`) every group a
    rule names exists. Raises PolicyInvalid with every problem."""
    document = _parsed(source)
    arguments = argument_types(tool_schemas)
    result = cedarpy.validate_policies(source, policy_schema(arguments))
    names = result.id_annotations_by_policy_id
    errors = [f"{_label(e.policy_id, names)}: {e.error}" if e.policy_id else e.error for e in result.errors]
    errors += _names_unknown(document, arguments, result)
    entries, rule_errors = _entries(document)
    errors += rule_errors
    if group_names is not None:
        for entry in entries:
            for group in sorted(entry.rule.groups() if entry.rule else ()):
                if group not in group_names:
                    errors.append(f'rule "{entry.name}": no approver group "{group}" in this tenant')
    if errors:
        raise PolicyInvalid(errors)
    return CheckedPolicy(entries)


def _parsed(source: str) -> dict[str, Any]:
    """Cedar's JSON form of the source: each policy's effect, scope, conditions, annotations."""
    try:
        document: dict[str, Any] = json.loads(cedarpy.policies_to_json_str(source))
    except ValueError as error:
        raise PolicyInvalid([f"not valid Cedar: {error}"]) from None
    return document


def _entries(document: dict[str, Any]) -> tuple[tuple[PolicyEntry, ...], list[str]]:
    errors: list[str] = []
    if document.get("templates"):
        errors.append("templates (policies with ?principal or ?resource) are not approval rules: name the entities")
    entries: list[PolicyEntry] = []
    policies: dict[str, dict[str, Any]] = document.get("staticPolicies", {})
    for policy_id, policy in sorted(policies.items(), key=lambda item: _order(item[0])):
        annotations = policy.get("annotations", {})
        where, scope = _place(policy_id), scope_words(policy)
        try:
            if policy["effect"] == "permit":
                rule = rule_read(annotations, where=where)
                entries.append(PolicyEntry(policy_id, "permit", rule.name, rule, scope))
            else:
                entries.append(PolicyEntry(policy_id, "forbid", forbid_name(annotations, where=where), None, scope))
        except RuleInvalid as invalid:
            errors += invalid.messages
    names = [e.name for e in entries if e.effect == "permit"]
    errors += [
        f'rule "{n}": two permits have this @id; each rule needs a name of its own'
        for n in sorted(set(names))
        if names.count(n) > 1
    ]
    return tuple(entries), errors


def _names_unknown(
    document: dict[str, Any], arguments: Mapping[str, str], result: cedarpy.ValidationResult
) -> list[str]:
    """Cedar types `context.arguments has region` as plain false when no tool has `region`,
    so a condition guarded that way would never match and never fail: refused here too
    (once: not where Cedar's own message already names it)."""
    errors = []
    for policy_id, policy in sorted(document.get("staticPolicies", {}).items(), key=lambda item: _order(item[0])):
        label = _label(policy_id, {policy_id: policy.get("annotations", {}).get("id") or ""})
        for name, where in sorted(_context_names(policy.get("conditions", []))):
            if any(e.policy_id == policy_id and f"`{where}.{name}`" in e.error for e in result.errors):
                continue
            if where == "arguments" and name not in arguments:
                errors.append(f'{label}: no tool has an argument "{name}"')
            elif where == "context" and name not in _CONTEXT:
                errors.append(f'{label}: the context has no "{name}" (it has agent and arguments)')
    return errors


_CONTEXT = ("agent", "arguments")
_VAR_CONTEXT = {"Var": "context"}
_ARGUMENTS = {".": {"left": _VAR_CONTEXT, "attr": "arguments"}}


def _context_names(node: Any) -> set[tuple[str, str]]:
    """Every (name, "arguments" | "context") a condition reads or tests with `has`."""
    found: set[tuple[str, str]] = set()
    if isinstance(node, list):
        for item in node:
            found |= _context_names(item)
    elif isinstance(node, dict):
        for op, arg in node.items():
            if op in (".", "has") and isinstance(arg, dict):
                if arg.get("left") == _ARGUMENTS:
                    found.add((arg["attr"], "arguments"))
                elif arg.get("left") == _VAR_CONTEXT:
                    found.add((arg["attr"], "context"))
            found |= _context_names(arg)
    return found


def _order(policy_id: str) -> tuple[int, str]:
    number = policy_id.removeprefix("policy")
    return (int(number), "") if number.isdigit() else (1 << 30, policy_id)


def _place(policy_id: str) -> str:
    """Cedar numbers a file's policies from 0 in the order written."""
    number = policy_id.removeprefix("policy")
    return f"policy {int(number) + 1} in the file" if number.isdigit() else f"policy {policy_id}"


def _label(policy_id: str, names: Mapping[str, str]) -> str:
    return f'rule "{names[policy_id]}"' if names.get(policy_id) else _place(policy_id)
