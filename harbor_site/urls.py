from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views.decorators.http import require_GET


@require_GET
def health(request):
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("healthz", health, name="health"),
    path("admin/", admin.site.urls),
    path("v1/", include("runs.api_urls")),
    path("", include("approvals.urls")),
    path("", include("runs.urls")),
]
