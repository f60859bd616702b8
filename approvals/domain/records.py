"""A pause's decision record, as an auditor reads it: what was asked (the tool and its
arguments as parked, and as edited), the policy rule that applied, every approval with its
actor and the fingerprint of the arguments it approved, who decided what, when (to the
second, in UTC) and why, and every refused decision with its actor. The admin exports it as CSV and JSON."""

import csv
import io
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from approvals.models import Pause

COLUMNS = [
    "pause",
    "tenant",
    "run",
    "cause",
    "reason",
    "tool",
    "requested_arguments",
    "arguments",
    "policy",
    "requested_by",
    "requested_at",
    "expires_at",
    "state",
    "decision",
    "decided_by",
    "decided_at",
    "decision_reason",
    "approvals",
    "refusals",
]


def instant(moment: datetime | None) -> str:
    """An instant to the second with its zone, e.g. 2026-12-07T23:59:01+00:00."""
    return moment.isoformat(timespec="seconds") if moment is not None else ""


def pause_record(pause: Pause) -> dict[str, Any]:
    payload = pause.payload or {}
    return {
        "pause": pause.pk,
        "tenant": pause.tenant.slug,
        "run": pause.run_id,
        "cause": pause.cause,
        "reason": pause.reason,
        "tool": pause.tool,
        "requested_arguments": payload.get("ArgsRequested", payload.get("Args")),
        "arguments": payload.get("Args"),  # as approved, after any edit
        "policy": {"version": pause.policy_version, "rule": pause.policy_rule.get("name")}
        if pause.policy_rule
        else None,
        "requested_by": pause.identity_user,
        "requested_at": instant(pause.created_at),
        "expires_at": instant(pause.expires_at),
        "state": pause.state,
        "decision": pause.decision,
        "decided_by": pause.decided_by.username if pause.decided_by else "",
        "decided_at": instant(pause.decided_at),
        "decision_reason": pause.decision_reason,
        "approvals": [
            {
                "actor": approval.actor.username,
                "fingerprint": approval.fingerprint,
                "arguments": approval.arguments,
                "reason": approval.reason,
                "at": instant(approval.created_at),
            }
            for approval in pause.approvals.all()
        ],
        "refusals": [
            {
                "actor": refusal.actor_user,
                "method": refusal.method,
                "code": refusal.code,
                "at": instant(refusal.created_at),
            }
            for refusal in pause.refusals.all()
        ],
    }


def records_of(pauses: Iterable[Pause]) -> list[dict[str, Any]]:
    return [pause_record(pause) for pause in pauses]


def records_json(records: list[dict[str, Any]]) -> str:
    return json.dumps(records, ensure_ascii=False, indent=2)


def _cell(value: object) -> object:
    """A cell a spreadsheet shows as text: structures as JSON, and a value that would start a
    formula (an agent's argument may) led by a quote."""
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value
    if isinstance(text, str) and text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + text
    return text


def records_csv(records: list[dict[str, Any]]) -> str:
    """One row per pause; the arguments and refusals as JSON in their cells."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS)
    writer.writeheader()
    for record in records:
        writer.writerow({key: _cell(value) for key, value in record.items()})
    return out.getvalue()
