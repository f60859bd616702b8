from django.contrib.auth import views as auth_views
from django.urls import path

from runs.web import views
from runs.web.sign_in import SignInView

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("tenant/", views.tenant_switch, name="tenant_switch"),
    path("console/", views.console, name="console"),
    path("console/new/", views.run_new, name="run_new"),
    path("console/runs/<str:run_id>/", views.run_detail, name="run"),
    path("console/runs/<str:run_id>/steer/<str:method>/", views.run_steer, name="run_steer"),
]
