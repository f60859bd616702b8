"""One handler for every view under /v1/: every failure is `{code, message}` with its status."""

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from runs.domain.connection_loss import was_lost
from runs.kernel.errors import (
    HTTP_STATUS,
    HarborError,
    RateLimited,
)

from . import lost_connection

log = logging.getLogger("harbor.api")


# --- Errors: one handler for every view under /v1/ -------------------------------------------


def error_response(
    code: str, message: str, status: int | None = None, headers: dict | None = None, fields: dict | None = None
) -> Response:
    # A message may quote the request (a key, a value): never let a lone surrogate in it
    # break the JSON rendering of the error itself.
    body: dict[str, object] = {"code": code, "message": _printable(message)}
    if fields:  # PROTOCOL §7's extension: what is wrong with each field of a refused payload
        body["fields"] = {_printable(str(name)): _printable(str(problem)) for name, problem in fields.items()}
    return Response(body, status=status or HTTP_STATUS.get(code, 500), headers=headers)


def _printable(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def method_not_allowed(method: str | None, allow: str = "GET") -> JsonResponse:
    """PROTOCOL §7's answer to a wrong method, for the /v1/ views that are not DRF's."""
    response = JsonResponse({"code": "invalid_request", "message": f"{method} is not allowed; use GET"}, status=405)
    response["Allow"] = allow
    return response


def harbor_error_response(error: HarborError) -> Response:
    """A HarborError as PROTOCOL §7 says: its code's status; an unknown code is a runtime error."""
    code = error.code if error.code in HTTP_STATUS else "runtime_error"
    headers = {"WWW-Authenticate": 'Bearer realm="harbor"'} if HTTP_STATUS[code] == 401 else None
    retry_after = getattr(error, "retry_after", None)
    if isinstance(error, RateLimited) and retry_after:
        headers = {"Retry-After": str(retry_after)}
    return error_response(code, error.message, headers=headers, fields=getattr(error, "fields", None))


def _drf_message(detail: object) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {_drf_message(value)}" for key, value in detail.items())
    if isinstance(detail, list):
        return " ".join(_drf_message(item) for item in detail)
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Map every exception to a protocol error body (PROTOCOL §7)."""
    if isinstance(exc, HarborError):
        if exc.code not in HTTP_STATUS or HTTP_STATUS[exc.code] >= 500:
            log.error("runtime error answering %s: %s", _path(context), exc.message)
        return harbor_error_response(exc)
    if isinstance(exc, drf.Throttled):
        return error_response(
            "rate_limited",
            "too many refused decisions; try again later",
            headers={"Retry-After": str(int(exc.wait or 60))},  # type: ignore[attr-defined]  # the stubs miss Throttled.wait
        )
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
    if was_lost(exc):
        message = lost_connection.MESSAGE
        lost_connection.reconnect()
        log.warning("answering %s: %s", _path(context), message)
        return error_response("runtime_error", message, headers={"Retry-After": "1"})
    if isinstance(exc, drf.APIException) and exc.status_code < 500:
        # ParseError, UnsupportedMediaType, NotAcceptable, ValidationError: the request's fault.
        return error_response("invalid_request", _drf_message(exc.detail))
    log.exception("unexpected error answering %s", _path(context), exc_info=exc)
    return error_response("runtime_error", "internal error")


def _path(context: dict[str, Any]) -> str:
    request = context.get("request")
    return getattr(request, "path", "?")
