"""The /v1 routes: parse, call one service or selector, serialise."""

from collections.abc import Callable

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from approvals.domain import selectors as pause_selectors
from approvals.models import Pause
from runs.application import run_start, steering_landed, steering_submit
from runs.domain import instructions, selectors
from runs.domain.instructions import InstructionSpec
from runs.identity.callers import Caller
from runs.kernel.errors import UnknownMethod
from runs.kernel.ids import new_ulid
from runs.models import Run
from runs.protocol import serializers as s

from .pipeline import CONTROL_ERRORS, ERRORS, ProtocolView
from .throttle import DecisionRefusalThrottle


def _tokens_shown(caller: Caller, pauses: list[Pause]) -> Callable[[str], bool]:
    """Which resume tokens the snapshots may carry (PauseSnapshotSerializer's context)."""
    return pause_selectors.tokens_shown(caller=caller, pauses=pauses)


# --- Routes ---------------------------------------------------------------------------------


class StartView(ProtocolView):
    run_id = ""  # chosen once per request: answered again, it finds the run it made

    def landed(self) -> Response | None:
        run = selectors.run_started_by(caller=self.caller, run_id=self.run_id) if self.run_id else None
        return None if run is None else self._answer(run, reused=False)

    def _answer(self, run: Run, *, reused: bool) -> Response:
        return Response(s.StartResponseSerializer({"task_id": run.pk, "reused": reused}).data)

    @extend_schema(
        operation_id="control_start",
        tags=["control"],
        request=s.StartRequestSerializer,
        responses={
            200: s.StartResponseSerializer,
            **ERRORS,
            403: OpenApiResponse(s.ErrorSerializer, description="scope_mismatch (a priority above 0 without admin)"),
        },
        summary="Start a task (run)",
        examples=[
            OpenApiExample(
                "deploy",
                request_only=True,
                value={
                    "identity": {},
                    "query": "deploy build 42 to staging",
                    "agent_id": "deploy",
                    "idempotency_key": "k-1",
                },
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.validated(s.StartRequestSerializer)
        data.pop("identity", None)
        self.run_id = self.run_id or new_ulid()
        run, reused = run_start(caller=self.caller, run_id=self.run_id, **data)
        return self._answer(run, reused=reused)


class ControlView(ProtocolView):
    """`/v1/control/{method}`: one of the nine steering methods, through steering_submit
    (which checks the payload against the method's spec)."""

    method: str = ""
    request_serializer = s.ControlRequestSerializer
    throttle_classes = [DecisionRefusalThrottle]
    instruction_id = ""  # chosen once per request: after a lost connection, what it wrote is looked for

    def landed(self) -> Response | None:
        run_id = (self.body.get("identity") or {}).get("run")
        if not self.instruction_id or not isinstance(run_id, str):
            return None
        landed = steering_landed(caller=self.caller, run_id=run_id, instruction_id=self.instruction_id)
        return self._answer(self.method) if landed else None

    def _answer(self, method: str) -> Response:
        return Response(s.ControlResponseSerializer({"method": method}).data)

    def post(self, request: Request, method: str | None = None) -> Response:
        data = self.validated(self.request_serializer)
        identity = data["identity"]
        self.instruction_id = self.instruction_id or new_ulid()
        receipt = steering_submit(
            caller=self.caller,
            instruction_id=self.instruction_id,
            run_id=identity["run"],
            method=self.method,
            payload=self.body.get("payload"),  # as sent: the service owns each payload's rules
            event_id=data.get("event_id"),
            requested_scope=identity.get("scope"),
        )
        return self._answer(receipt.instruction.instruction)


def control_view(spec: InstructionSpec) -> type[ControlView]:
    """One view class per method, so the OpenAPI document shows each method's payload."""
    serializer = s.control_request_serializer(spec)

    @extend_schema(
        operation_id=f"control_{spec.name}",
        tags=["control"],
        request=serializer,
        summary=spec.summary,
        responses={200: s.ControlResponseSerializer, **CONTROL_ERRORS},
    )
    def post(self: ControlView, request: Request) -> Response:
        return ControlView.post(self, request)

    name = f"{serializer.__name__.removesuffix('Request')}View"
    return type(name, (ControlView,), {"method": spec.name, "post": post})


# The product's nine: an instruction registered anywhere else never gets a route.
CONTROL_VIEWS = {spec.name: control_view(spec) for spec in instructions.specs()}


class UnknownMethodView(ProtocolView):
    """Any other `/v1/control/{name}`: the nine are a closed set."""

    permission_classes: list = []
    authentication_classes: list = []

    @extend_schema(exclude=True)
    def post(self, request: Request, method: str) -> Response:
        instructions.spec_for(method)  # never found: the nine have their own routes
        raise UnknownMethod(f"unknown steering method {method[:64]!r}")


class ReadView(ProtocolView):
    """A read: after a lost connection it is answered again, which changes nothing."""


class PauseListView(ReadView):
    @extend_schema(
        operation_id="pause_list",
        tags=["pauses"],
        request=s.PauseListRequestSerializer,
        responses={200: s.PauseListResponseSerializer, **ERRORS},
        summary="List pause snapshots (default: open)",
    )
    def post(self, request: Request) -> Response:
        data = self.validated(s.PauseListRequestSerializer)
        filters = dict(data.get("filter", {}))
        filters.setdefault("status", "paused")
        page = pause_selectors.pause_list(caller=self.caller, page=data["page"], page_size=data["page_size"], **filters)
        context = {"may_see_token": _tokens_shown(self.caller, page.rows)}
        return Response(s.PauseListResponseSerializer(page, context=context).data)


class TaskListView(ReadView):
    @extend_schema(
        operation_id="tasks_list",
        tags=["tasks"],
        request=s.TaskListRequestSerializer,
        responses={200: s.TaskListResponseSerializer, **ERRORS},
        summary="List tasks with counts by status",
    )
    def post(self, request: Request) -> Response:
        data = self.validated(s.TaskListRequestSerializer)
        page, counts = selectors.task_list(
            caller=self.caller, page=data["page"], page_size=data["page_size"], **data.get("filter", {})
        )
        return Response(s.TaskListResponseSerializer(page, context={"counts": counts}).data)


class TaskGetView(ReadView):
    @extend_schema(
        operation_id="tasks_get",
        tags=["tasks"],
        request=s.TaskGetRequestSerializer,
        responses={200: s.TaskDetailSerializer, **ERRORS},
        summary="One task with its pauses and steering history",
    )
    def post(self, request: Request) -> Response:
        data = self.validated(s.TaskGetRequestSerializer)
        run = pause_selectors.task_detail(caller=self.caller, run_id=data["identity"]["run"])
        context = {"may_see_token": _tokens_shown(self.caller, run.visible_pauses)}  # type: ignore[attr-defined]  # prefetched by task_detail
        return Response(s.TaskDetailSerializer(run, context=context).data)


@csrf_exempt
def not_found(request: HttpRequest, *args: object, **kwargs: object) -> JsonResponse:
    """Any other path under /v1/: JSON, never Django's HTML 404."""
    return JsonResponse({"code": "not_found", "message": f"no route {request.path}"}, status=404)
