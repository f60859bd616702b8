"""A tool's arguments against the schema it declares: each problem named by its field, in
plain words."""

import pytest
from jsonschema.exceptions import SchemaError

from runs.domain.arguments import arguments_problems, arguments_refused
from runs.runtime.agents import DEPLOY_ARGUMENTS
from runs.runtime.tools import Tool


@pytest.mark.parametrize(
    "args, problems",
    [
        ({"build": "42", "environment": "staging"}, {}),
        ({"build": "rc-1.2_3", "environment": "production"}, {}),
        ({"build": "42", "environment": ""}, {"environment": "must be one of staging, production"}),
        ({"build": "42"}, {"environment": "is required"}),
        ({"build": 42, "environment": "staging"}, {"build": "must be text"}),
        ({"build": "42", "environment": "staging", "force": True}, {"force": "is not an argument of this tool"}),
    ],
)
def test_each_problem_is_named_by_its_field(args, problems):
    assert arguments_problems(DEPLOY_ARGUMENTS, args) == problems


@pytest.mark.parametrize("build", ["not-a-build; rm -rf /", "", "-42", "a" * 65, "42\n"])
def test_a_build_name_is_letters_digits_dots_dashes(build):
    problem = arguments_problems(DEPLOY_ARGUMENTS, {"build": build, "environment": "staging"})["build"]
    assert problem.startswith("not a build name (letters, digits")


def test_the_refusal_names_every_field_in_its_message_and_fields():
    refused = arguments_refused("deploy_to_production", {"build": "is required", "environment": "must be x"})
    assert refused.code == "payload_invalid" and refused.fields == {"build": "is required", "environment": "must be x"}
    assert refused.message == "invalid arguments for deploy_to_production: build: is required; environment: must be x"


def test_a_broken_schema_fails_where_the_tool_is_declared():
    with pytest.raises(SchemaError):
        Tool("broken", lambda args, ctx: None, arguments={"type": "thing"})
