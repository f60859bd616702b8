"""The tools' argument schemas, as the policy schema needs them (`{tool name: JSON Schema}`).

A tool declares its arguments as a JSON Schema in `arguments`; a tool without one adds
nothing (a policy can still name the tool, not its arguments)."""

from collections.abc import Iterable
from typing import Any


def tool_argument_schemas(tools: Iterable[object]) -> dict[str, dict[str, Any]]:
    """`{name: JSON Schema}` for the given tools (any object with a `name`; the first tool of
    a name wins, as agents share the demo's tools by name)."""
    schemas: dict[str, dict[str, Any]] = {}
    for tool in tools:
        name = str(getattr(tool, "name", ""))
        schema = getattr(tool, "arguments", None)
        if name and isinstance(schema, dict) and name not in schemas:
            schemas[name] = schema
    return schemas
