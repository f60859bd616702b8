"""An approval rule: what the annotations of the `permit` that matched a gated call ask for.

    @id("production deploys")           the rule's name (required on every permit)
    @approvers("release-managers")      only members of this group decide (absent: any approver)
    @quorum("2")                        approvals needed, 1 to 10 (default 1)
    @requester_may_approve("true")      default false: the person who asked may not decide
    @reason_required("reject")          reject | approve | both | none (default none)
    @deadline_minutes("60")             the pause times out after this long (absent: no deadline)
    @at_deadline("timeout")             what the deadline does (timeout, the only value for now)
    @remind_minutes("15")               remind the approvers after this long
    @escalate_to("oncall")              with @escalate_minutes: who is asked next, and when

A `forbid` that matches says the call needs no approval; it takes only `@id`."""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

ReasonRequired = Literal["reject", "approve", "both", "none"]

PERMIT_KEYS = frozenset(
    {
        "id",
        "approvers",
        "quorum",
        "requester_may_approve",
        "reason_required",
        "deadline_minutes",
        "at_deadline",
        "remind_minutes",
        "escalate_to",
        "escalate_minutes",
    }
)
FORBID_KEYS = frozenset({"id"})

_GROUP_NAME = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")
_WHOLE_NUMBER = re.compile(r"^[0-9]{1,7}$")
_MINUTES_MAX = 366 * 24 * 60  # a year: longer is a typo, not a deadline
_NAME_MAX = 100


@dataclass(frozen=True)
class ApprovalRule:
    name: str
    approvers: str | None = None
    quorum: int = 1
    requester_may_approve: bool = False
    reason_required: ReasonRequired = "none"
    deadline_minutes: int | None = None
    at_deadline: Literal["timeout"] = "timeout"
    remind_minutes: int | None = None
    escalate_to: str | None = None
    escalate_minutes: int | None = None

    def groups(self) -> set[str]:
        """The approver groups the rule names (they must exist in the tenant)."""
        return {g for g in (self.approvers, self.escalate_to) if g}

    def reason_needed(self, decision: str) -> bool:
        """Whether a decision (`approve` or `reject`) must carry a reason under this rule."""
        return self.reason_required in ("both", decision)


class RuleInvalid(ValueError):
    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


def rule_read(annotations: Mapping[str, str | None], *, where: str) -> ApprovalRule:
    """The rule a permit's annotations describe; `where` names the policy in messages when it
    has no `@id`. Raises RuleInvalid listing every problem."""
    errors: list[str] = []
    raw = {key: (value if value is not None else "") for key, value in annotations.items()}
    name = raw.get("id", "").strip()
    label = f'rule "{name}"' if name else where
    if "id" not in raw:
        errors.append(f'{where}: a permit needs @id("…") to name its rule')
    elif not name or len(name) > _NAME_MAX:
        errors.append(f"{where}: @id must name the rule in 1 to {_NAME_MAX} characters")
    errors += [f"{label}: unknown annotation @{key}" for key in sorted(set(raw) - PERMIT_KEYS)]

    def number(key: str, low: int, high: int) -> int | None:
        if key not in raw:
            return None
        value = raw[key]
        if not _WHOLE_NUMBER.match(value) or not low <= int(value) <= high:
            errors.append(f'{label}: @{key} must be a whole number from {low} to {high}, not "{value}"')
            return None
        return int(value)

    def group(key: str) -> str | None:
        if key not in raw:
            return None
        if not _GROUP_NAME.match(raw[key]):
            errors.append(f'{label}: @{key} must name one approver group (letters, digits, - and _), not "{raw[key]}"')
            return None
        return raw[key]

    def choice(key: str, allowed: tuple[str, ...], default: str) -> str:
        value = raw.get(key, default)
        if value not in allowed:
            errors.append(f'{label}: @{key} must be one of {", ".join(allowed)}, not "{value}"')
            return default
        return value

    quorum = number("quorum", 1, 10)
    deadline = number("deadline_minutes", 1, _MINUTES_MAX)
    remind = number("remind_minutes", 1, _MINUTES_MAX)
    escalate_minutes = number("escalate_minutes", 1, _MINUTES_MAX)
    escalate_to = group("escalate_to")
    may_approve = choice("requester_may_approve", ("true", "false"), "false")
    reason = choice("reason_required", ("reject", "approve", "both", "none"), "none")
    choice("at_deadline", ("timeout",), "timeout")
    if ("escalate_to" in raw) != ("escalate_minutes" in raw):
        errors.append(f"{label}: @escalate_to and @escalate_minutes go together")
    if deadline and remind and remind >= deadline:
        errors.append(f"{label}: @remind_minutes must come before @deadline_minutes")
    if deadline and escalate_minutes and escalate_minutes >= deadline:
        errors.append(f"{label}: @escalate_minutes must come before @deadline_minutes")
    if "at_deadline" in raw and "deadline_minutes" not in raw:
        errors.append(f"{label}: @at_deadline needs @deadline_minutes")
    approvers = group("approvers")
    if errors:
        raise RuleInvalid(errors)
    return ApprovalRule(
        name=name,
        approvers=approvers,
        quorum=quorum or 1,
        requester_may_approve=may_approve == "true",
        reason_required=cast(ReasonRequired, reason),  # one of its values, checked above
        deadline_minutes=deadline,
        remind_minutes=remind,
        escalate_to=escalate_to,
        escalate_minutes=escalate_minutes,
    )


def forbid_name(annotations: Mapping[str, str | None], *, where: str) -> str:
    """A forbid's name (its `@id`, else its place); raises RuleInvalid on any other annotation."""
    errors = [
        f"{where}: a forbid takes only @id (it means no approval is needed), not @{key}"
        for key in sorted(set(annotations) - FORBID_KEYS)
    ]
    if errors:
        raise RuleInvalid(errors)
    return (annotations.get("id") or "").strip() or where


def strictest(rules: list[ApprovalRule]) -> ApprovalRule:
    """Of several rules that match one call, the one that asks most: the highest quorum, then
    the earliest deadline (none is latest), then the rule's name, so the choice never depends
    on the order of the file."""
    return min(rules, key=lambda r: (-r.quorum, r.deadline_minutes or _MINUTES_MAX + 1, r.name))
