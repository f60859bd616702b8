"""The schema's argument record, built from the tools' JSON Schemas."""

from dataclasses import dataclass

from approvals.policy.schema import argument_types, policy_schema
from approvals.policy.tool_arguments import tool_argument_schemas


def test_argument_types_from_json_schemas():
    schemas = {
        "deploy": {"properties": {"build": {"type": "string"}, "replicas": {"type": "integer"}}},
        "flag": {
            "properties": {"enabled": {"type": "boolean"}, "ratio": {"type": "number"}, "tags": {"type": "array"}}
        },
        "resize": {"properties": {"replicas": {"type": "integer"}}},
        "notes": None,  # a tool without a schema adds nothing
    }
    assert argument_types(schemas) == {"build": "String", "enabled": "Bool", "replicas": "Long"}


def test_a_name_two_tools_type_differently_is_left_out():
    schemas = {
        "a": {"properties": {"target": {"type": "string"}, "build": {"type": "string"}}},
        "b": {"properties": {"target": {"type": "integer"}}},
        "c": {"properties": {"build": {"type": "number"}}},  # a type Cedar cannot compare also counts
    }
    assert argument_types(schemas) == {}


def test_the_schema_makes_every_argument_optional():
    record = policy_schema({"build": "String"})["Harbor"]["commonTypes"]["Arguments"]
    assert record == {"type": "Record", "attributes": {"build": {"type": "String", "required": False}}}


@dataclass
class Declared:
    name: str
    arguments: dict


@dataclass
class Bare:
    name: str


def test_tools_declare_their_arguments_or_add_nothing():
    declared = Declared("resize", {"properties": {"replicas": {"type": "integer"}}})
    schemas = tool_argument_schemas([declared, Bare("notes"), Bare("deploy_to_production")])
    assert schemas == {"resize": declared.arguments}  # a tool without a schema adds nothing
    assert argument_types(schemas) == {"replicas": "Long"}


def test_the_demo_tools_declare_the_arguments_a_policy_compares():
    from runs.application.catalog import tools_offered

    schemas = tool_argument_schemas(tools_offered())
    assert schemas["deploy_to_production"]["properties"]["environment"]["enum"] == ["staging", "production"]
    types = argument_types(schemas)
    assert (types["build"], types["environment"]) == ("String", "String")
