"""/v1/: the Harbor Protocol over HTTP (PROTOCOL §2), its OpenAPI description and docs."""

from collections.abc import Callable
from functools import wraps

from csp.decorators import csp_update
from django.http import HttpRequest, HttpResponseBase
from django.urls import path, re_path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from runs.protocol import (
    schema,  # noqa: F401  (registers the bearer scheme with drf-spectacular)
    sse,
)
from runs.protocol import views as api
from runs.protocol.errors import method_not_allowed

# The docs pages' renderers inject styles and (Redoc) start a worker from a blob; their
# scripts still come only from our static files (the split Swagger view serves its init
# script from a URL, not inline).
_docs_csp = csp_update({"style-src": ["'unsafe-inline'"], "worker-src": ["'self'", "blob:"]})


def _page(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """A docs page answers GET; any other method gets PROTOCOL §7's JSON 405, not an error
    rendered by the page's HTML renderer. (`wraps` keeps the view's CSRF exemption.)"""

    @wraps(view)
    def page(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponseBase:
        if request.method not in ("GET", "HEAD"):
            return method_not_allowed(request.method, allow="GET, HEAD")
        return view(request, *args, **kwargs)

    return page


urlpatterns = [
    path("control/start", api.StartView.as_view(), name="api-start"),
    *[
        path(f"control/{method}", view.as_view(), name=f"api-control-{method}")
        for method, view in api.CONTROL_VIEWS.items()
    ],
    path("control/<str:method>", api.UnknownMethodView.as_view(), name="api-control-unknown"),
    path("pause/list", api.PauseListView.as_view(), name="api-pause-list"),
    path("tasks/list", api.TaskListView.as_view(), name="api-tasks-list"),
    path("tasks/get", api.TaskGetView.as_view(), name="api-tasks-get"),
    path("events", sse.events_stream, name="api-events"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="api-schema"),
    path("docs", _page(_docs_csp(SpectacularSwaggerSplitView.as_view(url_name="api-schema"))), name="api-docs"),
    path("redoc", _page(_docs_csp(SpectacularRedocView.as_view(url_name="api-schema"))), name="api-redoc"),
    re_path(r"^.*$", api.not_found, name="api-not-found"),
]
