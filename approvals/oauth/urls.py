"""The OAuth callback (mounted ahead of the protocol's /v1/ catch-all) and the Connected
accounts page."""

from django.urls import path

from .accounts import connected_accounts, disconnect, sign_in_again
from .begin import sign_in_begin
from .callback import oauth_callback

app_name = "oauth"

urlpatterns = [
    path("v1/tools/oauth/callback", oauth_callback, name="callback"),
    path("accounts/connected/", connected_accounts, name="connected_accounts"),
    path("accounts/connected/<slug:source_name>/disconnect/", disconnect, name="disconnect"),
    path("accounts/sign-in/begin/", sign_in_begin, name="begin"),  # ahead of the pause ids
    path("accounts/sign-in/<str:pause_id>/", sign_in_again, name="sign_in_again"),
]
