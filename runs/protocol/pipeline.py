"""The request pipeline every /v1/ POST route shares (see runs.protocol)."""

from collections.abc import Callable, Iterable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions as drf
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from runs.domain.connection_loss import retry_once_if_lost
from runs.domain.payload import MAX_KEYS, MAX_REQUEST_BYTES, check_bounds, json_loads
from runs.identity.callers import Caller
from runs.kernel.errors import (
    IdentityRequired,
    InvalidRequest,
    PayloadInvalid,
    RequestTooLarge,
)
from runs.protocol import serializers as s
from runs.protocol.auth import BearerAuthentication

from . import lost_connection
from .errors import _drf_message, exception_handler

# --- The request pipeline -----------------------------------------------------------------


def read_json_body(request: HttpRequest) -> dict[str, Any]:
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
        body = json_loads(raw)
    except ValueError as error:  # UnicodeDecodeError too; NaN and Infinity are not JSON
        raise InvalidRequest(f"the body is not valid JSON: {str(error)[:200]}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    # Bounds before anything walks the body, so no walk goes deeper than MAX_DEPTH.
    if len(body) > MAX_KEYS:
        raise PayloadInvalid(f"the body has {len(body)} keys; the limit is {MAX_KEYS}")
    for key, value in body.items():
        check_bounds(value, what=key[:64])
    _check_text(body)
    return body


def _check_text(value: object) -> None:
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

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        return next(iter(parsers), None)

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type


class HasVerifiedIdentity(BasePermission):
    """Step 4: a verified caller, and a body identity that does not contradict it."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        caller = request.auth
        if not isinstance(caller, Caller):
            raise IdentityRequired("send Authorization: Bearer <JWT> (and X-Harbor-Session, or a session claim)")
        identity = view.body.get("identity") if isinstance(view, ProtocolView) else None
        if isinstance(identity, dict):
            actual = {"tenant": caller.tenant.slug, "user": caller.user.username, "session": caller.session}
            for key, value in actual.items():
                if (
                    key in identity
                    and identity[key] != value
                    and not (key == "user" and caller.names_me(identity[key]))
                ):
                    raise IdentityRequired(f"the body identity's {key} contradicts the verified token")
        return True


class ProtocolView(APIView):
    """Base of every /v1/ POST route: the pipeline of this module's docstring."""

    http_method_names = ["post"]  # the protocol's routes are POST only (OPTIONS too is a 405)
    authentication_classes = [BearerAuthentication]
    permission_classes = [HasVerifiedIdentity]
    throttle_classes: list = []
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JSONOnly
    body: dict = {}

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response]:
        return exception_handler

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        self.answered_again = False
        try:
            return super().dispatch(request, *args, **kwargs)
        except lost_connection.AnswerAgain:
            self.answered_again = True  # once: a second loss is answered as an error
            return super().dispatch(request, *args, **kwargs)

    def landed(self) -> Response | None:
        """After a lost connection, the answer of this request if what it wrote is found
        (runs.protocol.lost_connection); None: nothing of it landed."""
        return None

    def handle_exception(self, exc: Exception) -> Response:
        if not self.answered_again and lost_connection.lost(exc):
            lost_connection.reconnect()
            try:
                answer = retry_once_if_lost(self.landed)
            except DatabaseError:  # the database is still out of reach: the error is answered
                return super().handle_exception(exc)
            if answer is not None:
                return answer
            raise lost_connection.AnswerAgain from exc
        return super().handle_exception(exc)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # A wrong HTTP method is answered 405 before anything else looks at the request.
        method = (request.method or "").lower()
        if method not in self.http_method_names or not hasattr(self, method):
            raise drf.MethodNotAllowed(request.method or "")
        self.body = read_json_body(request._request)
        super().initial(request, *args, **kwargs)

    @property
    def caller(self) -> Caller:
        caller = self.request.auth
        assert isinstance(caller, Caller)  # HasVerifiedIdentity let the request through
        return caller

    def validated(self, serializer_class: type[Serializer]) -> dict[str, Any]:
        serializer = serializer_class(data=self.body)
        if not serializer.is_valid():
            errors = serializer.errors
            if set(errors) == {"payload"}:
                # The body has the method's shape; its payload breaks the method's rules
                # (PROTOCOL §3): 422, as in Harbor.
                raise PayloadInvalid(_drf_message(errors))
            raise InvalidRequest(_drf_message(errors))
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
    404: OpenApiResponse(
        s.ErrorSerializer, description="not_found (unknown, foreign or terminal run; no open pause), unknown_method"
    ),
    409: OpenApiResponse(s.ErrorSerializer, description="already_resumed (extension)"),
    429: OpenApiResponse(s.ErrorSerializer, description="rate_limited (extension)"),
}
