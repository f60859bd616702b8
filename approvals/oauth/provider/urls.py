from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import views

urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view(template_name="provider/login.html"), name="login"),
    path("api/calendar/events", views.calendar_events, name="calendar-events"),
    path("healthz", views.healthz, name="healthz"),
    path("", views.home, name="home"),
]
