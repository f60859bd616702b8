"""The sign-in page: Django's LoginView, with a new session key at every sign-in.

Django's view answers a POST from an already signed-in browser with a redirect, never
reading the form, so a session cookie planted in the browser (the attacker's own sign-in)
outlived the person's password sign-in; and Django's login() keeps the key when the same
person signs in again. Here a POST always signs in, and always under a new key."""

from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, HttpResponseBase


class SignInView(auth_views.LoginView):
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        # Only a page view skips the form for someone already signed in; a sign-in is read.
        self.redirect_authenticated_user = request.method == "GET"
        return super().dispatch(request, *args, **kwargs)

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        self.request.session.cycle_key()  # whatever key the browser brought dies here
        return super().form_valid(form)
