"""The provider's own pages beside django-oauth-toolkit's: the protected calendar API (a
bearer token with the `calendar.read` scope), a health check, and a home page."""

from datetime import date, timedelta

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from oauth2_provider.oauth2_backends import get_oauthlib_core

# Each person's calendar: the same few events, every day from today.
AGENDA = {
    "alice": [("09:30", "Stand-up"), ("12:00", "Lunch with Bob"), ("15:00", "Release review")],
    "bob": [("10:00", "Approvals triage"), ("16:30", "1:1 with Alice")],
    "gina": [("11:00", "Globex planning")],
}


def calendar_events(request: HttpRequest) -> JsonResponse:
    """GET with `Authorization: Bearer <access token>`: the token's owner's events."""
    valid, oauth_request = get_oauthlib_core().verify_request(request, scopes=["calendar.read"])
    if not valid:
        return JsonResponse(
            {"error": "invalid_token", "error_description": "the access token is missing, expired or revoked"},
            status=401,
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    user = oauth_request.user
    today = date.today()
    events = [
        {"date": (today + timedelta(days=day)).isoformat(), "time": time, "title": title}
        for day in range(2)
        for time, title in AGENDA.get(user.username, [])
    ]
    return JsonResponse({"owner": user.username, "events": events})


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "provider/home.html")
