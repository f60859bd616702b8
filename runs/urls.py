from django.contrib.auth import views as auth_views
from django.contrib.staticfiles.views import serve as serve_static
from django.urls import path, re_path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("console/", views.console, name="console"),
    path("console/new/", views.run_new, name="run_new"),
    path("console/runs/<str:run_id>/", views.run_detail, name="run"),
    path("console/runs/<str:run_id>/steer/<str:method>/", views.run_steer, name="run_steer"),
    # WhiteNoise serves static files first; this fallback keeps the pages' one stylesheet
    # and one script working where `collectstatic` has not been run (a fresh checkout).
    re_path(r"^static/(?P<path>.+)$", serve_static, {"insecure": True}),
]
