"""The Harbor Protocol over HTTP (PROTOCOL §2-§4, §7): thin DRF views that parse, call one
service or selector, and serialise.

Every request goes through the same pipeline, in this order, failing closed:

1. size: a body over MAX_REQUEST_BYTES is `413 request_too_large`, before it is parsed;
2. parse: the body must be a JSON object (`400 invalid_request`);
3. bounds: every top-level value within PROTOCOL §3's payload bounds (`422 payload_invalid`);
4. identity: a verified bearer JWT (runs.auth), and a body identity that does not
   contradict it (`401 auth_rejected` / `401 identity_required`);
5. throttle: decisions are refused with `429 rate_limited` after repeated refusals;
6. shape: strict request validation (`400 invalid_request`), then the one service call.

One exception handler turns every failure into `{"code", "message"}` with its status;
nothing under /v1/ answers with HTML or a bare 500.
"""

import json
import logging
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import exceptions as drf
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from approvals import selectors as pause_selectors
from approvals.models import DecisionRefusal

from . import selectors, serializers as s
from .auth import BearerAuthentication
from .errors import (
    HTTP_STATUS,
    HarborError,
    IdentityRequired,
    InvalidRequest,
    PayloadInvalid,
    RateLimited,
    RequestTooLarge,
    UnknownMethod,
)
from .identity import Caller
from .models import Instruction
from .payload import MAX_KEYS, check_bounds
from .services import run_start, steering_submit

log = logging.getLogger("harbor.api")

PROTOCOL_VERSION = s.PROTOCOL_VERSION
MAX_REQUEST_BYTES = 64 * 1024
DECISION_METHODS = frozenset({Instruction.APPROVE, Instruction.REJECT, Instruction.RESUME})


# --- Errors: one handler for every view under /v1/ -------------------------------------------


def error_response(code: str, message: str, status: int | None = None, headers: dict | None = None) -> Response:
    return Response({"code": code, "message": message}, status=status or HTTP_STATUS.get(code, 500), headers=headers)


def _drf_message(detail) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {_drf_message(value)}" for key, value in detail.items())
    if isinstance(detail, list):
        return " ".join(_drf_message(item) for item in detail)
    return str(detail)


def exception_handler(exc, context) -> Response:
    """Map every exception to a protocol error body (PROTOCOL §7)."""
    if isinstance(exc, HarborError):
        code = exc.code if exc.code in HTTP_STATUS else "runtime_error"
        if code == "runtime_error":
            log.error("runtime error answering %s: %s", _path(context), exc.message)
        headers = {"WWW-Authenticate": 'Bearer realm="harbor"'} if HTTP_STATUS[code] == 401 else None
        if isinstance(exc, RateLimited) and getattr(exc, "retry_after", None):
            headers = {"Retry-After": str(exc.retry_after)}
        return error_response(code, exc.message, headers=headers)
    if isinstance(exc, drf.Throttled):
        return error_response("rate_limited", "too many refused decisions; try again later",
                              headers={"Retry-After": str(int(exc.wait or 60))})
    if isinstance(exc, drf.MethodNotAllowed):
        allowed = ", ".join(context["view"].allowed_methods) if context.get("view") else ""
        return error_response("invalid_request", _drf_message(exc.detail), status=405, headers={"Allow": allowed})
    if isinstance(exc, (drf.NotFound, Http404)):
        return error_response("not_found", "not found")
    if isinstance(exc, drf.NotAuthenticated):
        return error_response("identity_required", _drf_message(exc.detail))
    if isinstance(exc, drf.AuthenticationFailed):
        return error_response("auth_rejected", _drf_message(exc.detail))
    if isinstance(exc, (drf.PermissionDenied, DjangoPermissionDenied)):
        return error_response("scope_mismatch", "permission denied")
    if isinstance(exc, drf.APIException) and exc.status_code < 500:
        # ParseError, UnsupportedMediaType, NotAcceptable, ValidationError: the request's fault.
        return error_response("invalid_request", _drf_message(exc.detail))
    log.exception("unexpected error answering %s", _path(context), exc_info=exc)
    return error_response("runtime_error", "internal error")


def _path(context) -> str:
    request = context.get("request")
    return getattr(request, "path", "?")


# --- The request pipeline -----------------------------------------------------------------


def read_json_body(request) -> dict:
    """Steps 1-3: size, JSON object, bounds. Any content type is read as JSON (the protocol's
    bodies are all JSON, and curl's default form type should not make a difference)."""
    length = request.META.get("CONTENT_LENGTH") or ""
    if length:
        try:
            declared = int(length)
        except ValueError:
            raise InvalidRequest("Content-Length is not a number") from None
        if declared > MAX_REQUEST_BYTES:
            raise RequestTooLarge(f"the body is {declared} bytes; the limit is {MAX_REQUEST_BYTES}")
    try:
        raw = request.body
    except RequestDataTooBig:
        raise RequestTooLarge(f"the body is over {MAX_REQUEST_BYTES} bytes") from None
    if len(raw) > MAX_REQUEST_BYTES:
        raise RequestTooLarge(f"the body is {len(raw)} bytes; the limit is {MAX_REQUEST_BYTES}")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as error:
        raise InvalidRequest(f"the body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    _check_text(body)
    if len(body) > MAX_KEYS:
        raise PayloadInvalid(f"the body has {len(body)} keys; the limit is {MAX_KEYS}")
    for key, value in body.items():
        check_bounds(value, what=key)
    return body


def _check_text(value) -> None:
    """Strings must be storable as they are: no NUL characters and no lone surrogates (a
    JSON escape like \\ud800), which no database column holds."""
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidRequest("strings may not contain NUL (U+0000)")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequest("strings must be valid Unicode (a lone surrogate was sent)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)
    elif isinstance(value, list):
        for item in value:
            _check_text(item)


class JSONOnly(BaseContentNegotiation):
    """Every /v1/ answer is JSON, whatever the Accept header asks for (never a 406)."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class HasVerifiedIdentity(BasePermission):
    """Step 4: a verified caller, and a body identity that does not contradict it."""

    def has_permission(self, request, view) -> bool:
        caller = request.auth
        if not isinstance(caller, Caller):
            raise IdentityRequired("send Authorization: Bearer <JWT> (and X-Harbor-Session, or a session claim)")
        identity = view.body.get("identity")
        if isinstance(identity, dict):
            actual = {"tenant": caller.tenant.slug, "user": caller.user.username, "session": caller.session}
            for key, value in actual.items():
                if key in identity and identity[key] != value:
                    raise IdentityRequired(f"the body identity's {key} contradicts the verified token")
        return True


class DecisionRefusalThrottle(BaseThrottle):
    """Step 5: token guessing. Refused decisions are audited (approvals.DecisionRefusal);
    too many in the window, per identity (tenant, user) or per address, and decisions are
    refused outright for a while."""

    def allow_request(self, request, view) -> bool:
        if getattr(view, "method", None) not in DECISION_METHODS or not isinstance(request.auth, Caller):
            return True
        caller: Caller = request.auth
        window = timedelta(seconds=getattr(settings, "HARBOR_REFUSAL_WINDOW_SECONDS", 900))
        recent = DecisionRefusal.objects.filter(created_at__gte=timezone.now() - window)
        per_identity = getattr(settings, "HARBOR_REFUSALS_PER_IDENTITY", 10)
        per_address = getattr(settings, "HARBOR_REFUSALS_PER_ADDRESS", 30)
        self.wait_seconds = int(window.total_seconds())
        if recent.filter(actor_tenant=caller.tenant.slug, actor_user=caller.user.username).count() >= per_identity:
            return False
        if caller.address and recent.filter(address=caller.address).count() >= per_address:
            return False
        return True

    def wait(self) -> float:
        return getattr(self, "wait_seconds", 60)


class ProtocolView(APIView):
    """Base of every /v1/ POST route: the pipeline of this module's docstring."""

    http_method_names = ["post"]  # the protocol's routes are POST only (OPTIONS too is a 405)
    authentication_classes = [BearerAuthentication]
    permission_classes = [HasVerifiedIdentity]
    throttle_classes: list = []
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JSONOnly
    body: dict = {}

    def get_exception_handler(self):
        return exception_handler

    def initial(self, request, *args, **kwargs):
        # A wrong HTTP method is answered 405 before anything else looks at the request.
        if request.method.lower() not in self.http_method_names or not hasattr(self, request.method.lower()):
            raise drf.MethodNotAllowed(request.method)
        self.body = read_json_body(request._request)
        super().initial(request, *args, **kwargs)

    @property
    def caller(self) -> Caller:
        return self.request.auth

    def validated(self, serializer_class) -> dict:
        serializer = serializer_class(data=self.body)
        if not serializer.is_valid():
            raise InvalidRequest(_drf_message(serializer.errors))
        return serializer.validated_data


ERRORS = {
    400: OpenApiResponse(s.ErrorSerializer, description="invalid_request"),
    401: OpenApiResponse(s.ErrorSerializer, description="identity_required, auth_rejected"),
    404: OpenApiResponse(s.ErrorSerializer, description="not_found"),
    405: OpenApiResponse(s.ErrorSerializer, description="invalid_request (method not allowed)"),
    413: OpenApiResponse(s.ErrorSerializer, description="request_too_large"),
    422: OpenApiResponse(s.ErrorSerializer, description="payload_invalid"),
    500: OpenApiResponse(s.ErrorSerializer, description="runtime_error"),
}
CONTROL_ERRORS = {
    **ERRORS,
    403: OpenApiResponse(s.ErrorSerializer, description="scope_mismatch, identity_scope_required"),
    404: OpenApiResponse(s.ErrorSerializer, description="not_found (unknown, foreign or terminal run; no open pause), unknown_method"),
    409: OpenApiResponse(s.ErrorSerializer, description="already_resumed (extension)"),
    429: OpenApiResponse(s.ErrorSerializer, description="rate_limited (extension)"),
}


# --- Routes ---------------------------------------------------------------------------------


class StartView(ProtocolView):
    @extend_schema(
        operation_id="control_start", tags=["control"], request=s.StartRequestSerializer,
        responses={200: s.StartResponseSerializer, **ERRORS,
                   403: OpenApiResponse(s.ErrorSerializer, description="scope_mismatch (a priority above 0 without admin)")},
        summary="Start a task (run)",
        examples=[OpenApiExample("deploy", request_only=True, value={
            "identity": {}, "query": "deploy build 42 to staging", "agent_id": "deploy", "idempotency_key": "k-1"})],
    )
    def post(self, request):
        data = self.validated(s.StartRequestSerializer)
        data.pop("identity", None)
        run, reused = run_start(caller=self.caller, **data)
        return Response({"task_id": run.pk, "reused": reused, "protocol_version": PROTOCOL_VERSION})


PAYLOADS = {
    Instruction.CANCEL: s.CancelPayload,
    Instruction.PAUSE: s.EmptyPayload,
    Instruction.RESUME: s.ResumePayload,
    Instruction.APPROVE: s.ApprovePayload,
    Instruction.REJECT: s.RejectPayload,
    Instruction.REDIRECT: s.RedirectPayload,
    Instruction.INJECT_CONTEXT: None,
    Instruction.USER_MESSAGE: s.UserMessagePayload,
    Instruction.PRIORITIZE: s.PrioritizePayload,
}
SUMMARIES = {
    Instruction.CANCEL: "Cancel a run (owner_user)",
    Instruction.PAUSE: "Park a run at its next step boundary (owner_user)",
    Instruction.RESUME: "Resume a non-gate pause (owner_user)",
    Instruction.APPROVE: "Approve a HITL gate, synchronously (owner_user or delegated approver)",
    Instruction.REJECT: "Reject a HITL gate, synchronously; the run fails (owner_user or delegated approver)",
    Instruction.REDIRECT: "Replace the run's goal (owner_user)",
    Instruction.INJECT_CONTEXT: "Append planner context (session_user)",
    Instruction.USER_MESSAGE: "Deliver a user message (session_user)",
    Instruction.PRIORITIZE: "Change scheduling priority (admin)",
}


class ControlView(ProtocolView):
    """`/v1/control/{method}`: one of the nine steering methods, through steering_submit."""

    method: str = ""
    request_serializer = s.ControlRequestSerializer
    throttle_classes = [DecisionRefusalThrottle]

    def post(self, request, method: str | None = None):
        data = self.validated(self.request_serializer)
        identity = data["identity"]
        receipt = steering_submit(
            caller=self.caller,
            run_id=identity["run"],
            method=self.method,
            payload=self.body.get("payload"),  # as sent: the service owns each payload's rules
            event_id=data.get("event_id"),
            requested_scope=identity.get("scope"),
        )
        return Response({"accepted": True, "method": receipt.instruction.instruction,
                         "protocol_version": PROTOCOL_VERSION})


def control_view(method: str) -> type[ControlView]:
    """One view class per method, so the OpenAPI document shows each method's payload."""
    serializer = s.control_request_serializer(method, PAYLOADS[method])

    @extend_schema(
        operation_id=f"control_{method}", tags=["control"], request=serializer, summary=SUMMARIES[method],
        responses={200: s.ControlResponseSerializer, **CONTROL_ERRORS},
    )
    def post(self, request):
        return ControlView.post(self, request)

    name = f"{serializer.__name__.removesuffix('Request')}View"
    return type(name, (ControlView,), {"method": method, "request_serializer": serializer, "post": post})


CONTROL_VIEWS = {method: control_view(method) for method in Instruction.values}


class UnknownMethodView(ProtocolView):
    """Any other `/v1/control/{name}`: the nine are a closed set."""

    permission_classes: list = []
    authentication_classes: list = []

    @extend_schema(exclude=True)
    def post(self, request, method: str):
        raise UnknownMethod(f"unknown steering method {method[:64]!r}; the nine are {', '.join(Instruction.values)}")


class PauseListView(ProtocolView):
    @extend_schema(
        operation_id="pause_list", tags=["pauses"], request=s.PauseListRequestSerializer,
        responses={200: s.PauseListResponseSerializer, **ERRORS}, summary="List pause snapshots (default: open)",
    )
    def post(self, request):
        data = self.validated(s.PauseListRequestSerializer)
        filters = dict(data.get("filter", {}))
        filters.setdefault("status", "paused")
        return Response(pause_selectors.pause_list(
            caller=self.caller, page=data["page"], page_size=data["page_size"], **filters))


class TaskListView(ProtocolView):
    @extend_schema(
        operation_id="tasks_list", tags=["tasks"], request=s.TaskListRequestSerializer,
        responses={200: s.TaskListResponseSerializer, **ERRORS}, summary="List tasks with counts by status",
    )
    def post(self, request):
        data = self.validated(s.TaskListRequestSerializer)
        return Response(selectors.task_list(
            caller=self.caller, page=data["page"], page_size=data["page_size"], **data.get("filter", {})))


class TaskGetView(ProtocolView):
    @extend_schema(
        operation_id="tasks_get", tags=["tasks"], request=s.TaskGetRequestSerializer,
        responses={200: s.TaskDetailSerializer, **ERRORS}, summary="One task with its pauses and steering history",
    )
    def post(self, request):
        data = self.validated(s.TaskGetRequestSerializer)
        return Response(selectors.task_detail(caller=self.caller, run_id=data["identity"]["run"]))


@csrf_exempt
def not_found(request, *args, **kwargs) -> JsonResponse:
    """Any other path under /v1/: JSON, never Django's HTML 404."""
    return JsonResponse({"code": "not_found", "message": f"no route {request.path}"}, status=404)


class BearerScheme(OpenApiAuthenticationExtension):
    target_class = "runs.auth.BearerAuthentication"
    name = "HarborBearer"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
            "description": "A JWT signed with RS256/384/512 or ES256/384/512 by a trusted key; claims tenant, "
                           "user, session, scopes, exp. `X-Harbor-Session` replaces the session claim. "
                           "Locally: `python manage.py harbor_token --tenant acme --user alice --session s1`.",
        }



def document_protocol(result, generator, request, public):
    """drf-spectacular hook: the agents registered in this deployment, and GET /v1/events
    (an async view outside DRF)."""
    from .runtime.registry import all_agents

    start = result.get("components", {}).get("schemas", {}).get("StartRequest", {}).get("properties", {})
    if "agent_id" in start:
        start["agent_id"]["enum"] = [agent.id for agent in all_agents()]
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    header = lambda name, description, schema: {  # noqa: E731
        "in": "header", "name": name, "required": False, "description": description, "schema": schema}
    result.setdefault("paths", {})["/v1/events"] = {"get": {
        "operationId": "events_stream",
        "summary": "The event stream (Server-Sent Events)",
        "description": (
            "Frames `event: <type>`, `id: <sequence>`, `data: <envelope JSON>`; opens with `retry: 3000`, "
            "a `: keepalive` comment every ~15 s. Filtered on the server to the runs the caller may see."),
        "tags": ["events"],
        "security": [{"HarborBearer": []}],
        "parameters": [
            header("Last-Event-ID", "Replay every retained event after this sequence, then tail live.",
                   {"type": "string", "pattern": "^[0-9]{1,18}$"}),
            header("X-Harbor-Run", "Only this run's events.", {"type": "string"}),
            header("X-Harbor-Event-Type", "Only these event types (comma-separated).", {"type": "string"}),
            header("X-Harbor-Session", "Replaces the token's session claim.", {"type": "string"}),
            {"in": "query", "name": "admin", "required": False, "schema": {"type": "string", "enum": ["1"]},
             "description": "Tenant-wide (needs the admin scope)."},
        ],
        "responses": {
            "200": {"description": "An endless text/event-stream.", "content": {"text/event-stream": {
                "schema": {"type": "string"}}}},
            "400": {"description": "invalid_request", "content": error},
            "401": {"description": "identity_required, auth_rejected", "content": error},
            "403": {"description": "identity_scope_required (?admin=1 without admin)", "content": error},
            "404": {"description": "not_found (X-Harbor-Run unknown or not visible)", "content": error},
        },
    }}
    return result
