"""The steering instructions are registered specs: the product holds the nine of PROTOCOL §3,
and each one's payload schema is the one the wire checks, the OpenAPI document shows and the
page forms check."""

import pytest
from django.test import Client
from django.utils.html import escape
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ComponentRegistry
from rest_framework.views import APIView

from runs.application import steering_submit
from runs.domain import instructions
from runs.domain.instruction_payloads import InstructionPayload
from runs.domain.instructions import Applied, InstructionSpec, Timing
from runs.identity.scopes import Scope
from runs.kernel.errors import UnknownMethod
from runs.models import DECISION_INSTRUCTIONS, Instruction, SteeringInstruction


def tenth(name: str = "explode") -> InstructionSpec:
    return InstructionSpec(
        name=name,
        payload=InstructionPayload,
        scope=Scope.SESSION_USER,
        timing=Timing.AT_ONCE,
        summary="Not a protocol verb",
        apply_now=lambda submission: Applied(),
    )


# --- (a) the product holds exactly the nine -------------------------------------------------------


def test_the_product_registry_holds_exactly_the_nine_of_the_wire():
    specs = instructions.specs()
    assert len(specs) == 9
    assert sorted(spec.name for spec in specs) == sorted(Instruction.values)
    assert {spec.name for spec in specs if spec.decides_pause} == set(DECISION_INSTRUCTIONS)
    at_once = {spec.name for spec in specs if spec.timing is Timing.AT_ONCE}
    assert at_once == {*DECISION_INSTRUCTIONS, Instruction.PRIORITIZE}
    least = {spec.name: spec.scope for spec in specs}
    assert least[Instruction.PRIORITIZE] == Scope.ADMIN and least[Instruction.USER_MESSAGE] == Scope.SESSION_USER


def test_the_product_registry_refuses_a_tenth():
    with pytest.raises(ValueError, match="closed set"):
        instructions.register(tenth())
    assert len(instructions.specs()) == 9


def test_a_tenth_in_an_isolated_registry_never_reaches_the_wire(api, people):
    registry = instructions.isolated()
    registry.register(tenth())
    assert registry.names() == ["explode"] and registry.spec_for("explode").name == "explode"

    run = api.start()
    api.error("/v1/control/explode", {"identity": {"run": run}}, status=404, code="unknown_method")
    with pytest.raises(UnknownMethod):
        steering_submit(caller=people.caller("alice"), run_id=run, method="explode")
    page = _signed_in("alice").post(f"/console/runs/{run}/steer/explode/", follow=True).content.decode()
    assert "Unknown steering method" in page
    assert not SteeringInstruction.objects.filter(run_id=run).exists()


# --- (b) one payload schema each: the OpenAPI document, the wire and the page ------------------


def _schema_of(payload: type[InstructionPayload]) -> dict | None:
    """The spec's payload schema as drf-spectacular renders it, the components it names resolved."""
    auto = AutoSchema()
    auto.registry, auto.method, auto.path = ComponentRegistry(), "POST", "/"
    view = APIView()
    view.request, view.format_kwarg = None, None  # type: ignore[assignment]  # no request: a schema only
    auto.view = view
    schema = auto._map_serializer_field(payload(), "request")
    components = {component.name: component.schema for component in auto.registry._components.values()}
    return _resolved(schema, components)


def _resolved(schema: dict | None, components: dict) -> dict | None:
    ref = (schema or {}).get("$ref")
    return components[ref.rsplit("/", 1)[-1]] if ref else schema


@pytest.mark.parametrize("name", Instruction.values)
def test_the_openapi_documents_payload_is_the_specs(api, name):
    document = api.client.get("/v1/openapi.json").json()
    components = document["components"]["schemas"]
    body = document["paths"][f"/v1/control/{name}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    request = _resolved(body, components)
    assert request is not None
    spec = instructions.spec_for(name)
    documented = _resolved(request["properties"].get("payload"), components)
    assert documented == _schema_of(spec.payload)  # pause: no payload, in both
    assert ("payload" in request.get("required", [])) == spec.payload.required_payload
    assert document["paths"][f"/v1/control/{name}"]["post"]["summary"] == spec.summary


# One invalid payload per instruction, as the wire sends it and as a page's form posts it. A
# page posts a decision's reason as text, so its breach is the bounds' (checked first).
INVALID: dict[str, tuple[dict, dict]] = {
    "cancel": ({"hard": "yes"}, {"hard": "yes"}),
    "resume": ({"reason": "x" * 4097}, {"reason": "x" * 4097}),
    "approve": ({"reason": "x" * 4097}, {"reason": "x" * 4097}),
    "reject": ({"reason": "x" * 4097}, {"reason": "x" * 4097}),
    "redirect": ({"goal": "   "}, {"goal": "   "}),
    "inject_context": ({}, {"context": ""}),
    "user_message": ({"message": " "}, {"message": " "}),
    "prioritize": ({"priority": 5000}, {"priority": "5000"}),
}


def test_every_instruction_but_pause_has_a_payload_to_refuse():
    # pause takes none: whatever is sent is dropped, on the wire as on a page.
    assert set(INVALID) == set(Instruction.values) - {"pause"}


def _signed_in(name: str) -> Client:
    client = Client()
    assert client.login(username=name, password=f"{name}-password")
    return client


@pytest.mark.parametrize("name", sorted(INVALID))
def test_an_invalid_payload_gets_the_same_field_error_on_the_wire_and_the_page(api, name):
    wire_payload, form = INVALID[name]
    run = api.start()
    answer = api.error(
        f"/v1/control/{name}", {"identity": {"run": run}, "payload": wire_payload}, status=422, code="payload_invalid"
    )
    page = _signed_in("alice").post(f"/console/runs/{run}/steer/{name}/", form, follow=True).content.decode()
    assert escape(f"Not accepted: {answer['message']}") in page
    field = next(iter(wire_payload), "non-empty object")  # the field the error names
    assert field in answer["message"]
    assert not SteeringInstruction.objects.filter(run_id=run).exists()
