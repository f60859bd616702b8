"""A tool's arguments checked against the JSON Schema (draft 2020-12) it declares, each
problem named by its field in plain words ("environment: must be one of staging, production").

Pure: the schema reaches a decision through the pause's payload (`ArgsSchema`), so the pause
core checks an approver's edits without knowing the runtime's tools."""

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from runs.kernel.errors import PayloadInvalid

JSON_TYPES = {"string": "text", "integer": "a whole number", "number": "a number", "boolean": "true or false"}


def _pattern(validator: Any, pattern: str, instance: object, schema: dict[str, Any]) -> Iterator[ValidationError]:
    """`pattern` as the schema's dialect (ECMA-262) and the browser read it: a `$` ends the
    text. Python's would also match before a final newline, letting "42\\n" pass as a build."""
    if isinstance(instance, str) and not _ecma(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@lru_cache(maxsize=256)
def _ecma(pattern: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


Validator = validators.extend(Draft202012Validator, {"pattern": _pattern})


def schema_check(schema: dict[str, Any]) -> None:
    """Refuse a schema that is not one (a tool's, as it is declared), loudly and early."""
    Draft202012Validator.check_schema(schema)


def arguments_problems(schema: dict[str, Any], args: object) -> dict[str, str]:
    """`{field: what is wrong with it}`, empty when `args` match `schema`."""
    problems: dict[str, str] = {}
    for error in sorted(Validator(schema).iter_errors(args), key=lambda e: list(map(str, e.path))):
        for field, problem in _described(error):
            problems.setdefault(field, problem)  # the first problem of a field is enough to fix
    return dict(sorted(problems.items()))


def arguments_refused(tool: str, problems: dict[str, str]) -> PayloadInvalid:
    """The 422 a call with these problems gets: every field in the message and in `fields`."""
    listed = "; ".join(f"{field}: {problem}" for field, problem in problems.items())
    return PayloadInvalid(f"invalid arguments for {tool}: {listed}", fields=problems)


def _described(error: ValidationError) -> list[tuple[str, str]]:
    field = ".".join(str(part) for part in error.absolute_path) or "arguments"
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind == "required" and isinstance(value, dict):
        return [(name, "is required") for name in expected if name not in value]
    if kind == "additionalProperties" and isinstance(value, dict):
        known = set(error.schema.get("properties", {}))
        return [(name, "is not an argument of this tool") for name in sorted(set(value) - known)]
    if kind == "enum":
        return [(field, "must be one of " + ", ".join(str(choice) for choice in expected))]
    if kind == "const":
        return [(field, f"must be {expected}")]
    if kind == "pattern":
        # The schema's own name for what it matches ("a build name"), and how it is spelled.
        title = error.schema.get("title") or f"valid {field}"
        hint = error.schema.get("description")
        return [(field, f"not a {title}" + (f" ({hint})" if hint else ""))]
    if kind == "type":
        kinds = expected if isinstance(expected, list) else [expected]
        return [(field, "must be " + " or ".join(JSON_TYPES.get(k, f"a JSON {k}") for k in kinds))]
    if kind == "minLength":
        return [(field, "must not be empty" if value == "" else f"must be at least {expected} characters")]
    if kind == "maxLength":
        return [(field, f"must be at most {expected} characters")]
    if kind in ("minimum", "exclusiveMinimum"):
        return [(field, f"must be {'at least' if kind == 'minimum' else 'more than'} {expected}")]
    if kind in ("maximum", "exclusiveMaximum"):
        return [(field, f"must be {'at most' if kind == 'maximum' else 'less than'} {expected}")]
    return [(field, error.message)]
