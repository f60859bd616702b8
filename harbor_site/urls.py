from collections.abc import Callable

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path
from django.views import defaults
from django.views.decorators.http import require_GET


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico on pages that name no icon of their own (the admin's)."""
    return redirect(static("harbor/favicon.svg"), permanent=True)


urlpatterns = [
    path("healthz", health, name="health"),
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    path("", include("approvals.oauth.urls")),  # before /v1/'s catch-all: the OAuth callback
    path("v1/", include("runs.protocol.urls")),
    path("", include("approvals.web.urls")),
    path("", include("runs.web.urls")),
]


# Errors raised outside the API's own handler (a middleware, a suspicious request) still
# answer /v1/ with the protocol's JSON body (PROTOCOL §7), never Django's HTML page.
def _protocol_error(
    default: Callable[..., HttpResponse], status: int, code: str, message: str
) -> Callable[..., HttpResponse]:
    def view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
        if request.path.startswith("/v1/"):
            return JsonResponse({"code": code, "message": message}, status=status)
        return default(request, exception) if exception is not None else default(request)

    return view


handler400 = _protocol_error(defaults.bad_request, 400, "invalid_request", "bad request")
handler403 = _protocol_error(defaults.permission_denied, 403, "scope_mismatch", "permission denied")
handler404 = _protocol_error(defaults.page_not_found, 404, "not_found", "not found")
handler500 = _protocol_error(defaults.server_error, 500, "runtime_error", "internal error")
