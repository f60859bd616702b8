"""The OAuth callback, mounted at /v1/tools/oauth/ ahead of the protocol's catch-all."""

from django.urls import path

from .callback import oauth_callback

urlpatterns = [path("callback", oauth_callback, name="oauth-callback")]
