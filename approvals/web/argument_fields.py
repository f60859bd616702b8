"""A gate's edit fields, drawn from the schema its tool declares (`ArgsSchema` in the pause's
payload): a choice is a select, a required argument is marked, a pattern is the field's, and
a refused edit shows what was typed with its problem beside it."""

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RefusedEdit:
    """An approver's edit the tool's schema refused: what was typed, and each field's problem."""

    values: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


def argument_fields(payload: dict[str, Any], refused: RefusedEdit | None = None) -> list[dict[str, Any]]:
    """One entry per argument: its name, its value (as text), and what its field needs."""
    schema = _mapping(payload.get("ArgsSchema"))
    properties = _mapping(schema.get("properties"))
    required = set(schema.get("required") or ())
    refused = refused or RefusedEdit()
    fields = []
    for name, value in (payload.get("Args") or {}).items():
        text = value if isinstance(value, str) else json.dumps(value)
        prop = _mapping(properties.get(name))
        fields.append(
            {
                "name": name,
                "value": text,
                "shown": refused.values.get(name, text),  # a refused edit comes back as typed
                "choices": [str(choice) for choice in prop.get("enum") or ()],
                "required": name in required,
                "pattern": _text(prop.get("pattern")),
                "hint": _text(prop.get("description")),
                "error": refused.problems.get(name, ""),
            }
        )
    return fields


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
