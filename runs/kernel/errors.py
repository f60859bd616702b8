"""Typed domain errors. Each carries its protocol code; one table maps codes to HTTP
statuses (PROTOCOL §7), used by the API's exception handler and by the pages."""


class HarborError(Exception):
    code = "runtime_error"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code.replace("_", " "))
        self.message = message or self.code.replace("_", " ")


class InvalidRequest(HarborError):
    code = "invalid_request"


class IdentityRequired(HarborError):
    code = "identity_required"


class AuthRejected(HarborError):
    code = "auth_rejected"


class ScopeMismatch(HarborError):
    code = "scope_mismatch"


class IdentityScopeRequired(HarborError):
    code = "identity_scope_required"


class NotFound(HarborError):
    code = "not_found"


class UnknownMethod(HarborError):
    code = "unknown_method"


class AlreadyResumed(HarborError):
    code = "already_resumed"


class RequestTooLarge(HarborError):
    code = "request_too_large"


class PayloadInvalid(HarborError):
    code = "payload_invalid"

    def __init__(self, message: str = "", *, fields: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.fields = fields or {}  # what is wrong with each field, when the payload has fields


class RateLimited(HarborError):
    code = "rate_limited"


HTTP_STATUS = {
    "invalid_request": 400,
    "identity_required": 401,
    "auth_rejected": 401,
    "scope_mismatch": 403,
    "identity_scope_required": 403,
    "not_found": 404,
    "unknown_method": 404,
    "already_resumed": 409,
    "request_too_large": 413,
    "payload_invalid": 422,
    "rate_limited": 429,
    "runtime_error": 500,
}


class ErrUnserializable(HarborError):
    """A tool context value is neither serializable nor a registered live handle."""

    code = "runtime_error"

    def __init__(self, field: str) -> None:
        super().__init__(
            f"ErrUnserializable: tool context field {field!r} is neither serializable nor a registered live handle"
        )
        self.field = field


class ErrToolContextLost(HarborError):
    """A resume needs a live handle that can no longer be re-attached."""

    code = "tool_context_lost"

    def __init__(self, handle: str) -> None:
        super().__init__(f"ErrToolContextLost: live handle {handle!r} cannot be re-attached")
        self.handle = handle
