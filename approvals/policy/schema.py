"""The Cedar schema policies are checked against: namespace `Harbor`, one action.

`Harbor::Action::"require_approval"` is asked with the requester as principal (a `User`, in
the `Group`s she belongs to), the gated `Tool` as resource, and the context
`{agent: String, arguments: Arguments}`. `Arguments` holds the tools' arguments, each
optional, typed from the tools' JSON Schemas: so a policy naming an argument no tool has, or
comparing it with the wrong type, fails validation instead of never matching."""

from collections.abc import Mapping
from typing import Any

NAMESPACE = "Harbor"
ACTION = "require_approval"

# The JSON Schema types a policy can compare; any other type leaves the argument out.
_CEDAR_TYPES = {"string": "String", "integer": "Long", "boolean": "Bool"}


def argument_types(tool_schemas: Mapping[str, Mapping[str, Any] | None]) -> dict[str, str]:
    """The product's argument map: `{tool name: JSON Schema}` to `{argument: Cedar type}`.

    Arguments of every tool share one record (the action is one), so a name two tools give
    different types, or a type Cedar cannot compare, is left out: a policy naming it fails
    validation rather than erring at decision time."""
    seen: dict[str, set[str]] = {}
    for schema in tool_schemas.values():
        properties = (schema or {}).get("properties") or {}
        for name, prop in properties.items():
            kind = prop.get("type") if isinstance(prop, Mapping) else None
            seen.setdefault(name, set()).add(kind if isinstance(kind, str) else repr(kind))
    return {
        name: _CEDAR_TYPES[kinds.pop()]
        for name, kinds in sorted(seen.items())
        if len(kinds) == 1 and next(iter(kinds)) in _CEDAR_TYPES
    }


def policy_schema(arguments: Mapping[str, str]) -> dict[str, Any]:
    """The schema (Cedar's JSON form) for an argument map from `argument_types`."""
    return {
        NAMESPACE: {
            "entityTypes": {
                "User": {"memberOfTypes": ["Group"]},
                "Group": {},
                "Tool": {},
                "Agent": {},
            },
            "commonTypes": {
                "Arguments": {
                    "type": "Record",
                    "attributes": {name: {"type": kind, "required": False} for name, kind in sorted(arguments.items())},
                }
            },
            "actions": {
                ACTION: {
                    "appliesTo": {
                        "principalTypes": ["User"],
                        "resourceTypes": ["Tool"],
                        "context": {
                            "type": "Record",
                            "attributes": {"agent": {"type": "String"}, "arguments": {"type": "Arguments"}},
                        },
                    }
                }
            },
        }
    }
