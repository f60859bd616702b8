"""The Connected accounts page: the sources a person has signed in to (in the tenant they
work in), and a way to disconnect each. A disconnected source asks again next time."""

from typing import cast

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from runs.identity.callers import Caller
from runs.web.access import member_required

from .callback import Outcome, respond
from .completion import FlowGone, flow_restart
from .credentials import credential_list, credential_revoke
from .sources import SourceMissing, source_get


def _caller(request: HttpRequest) -> Caller:
    return cast(Caller, getattr(request, "caller"))  # set by member_required


@member_required
@require_GET
def connected_accounts(request: HttpRequest) -> HttpResponse:
    caller = _caller(request)
    rows = []
    for credential in credential_list(tenant=caller.tenant, user=caller.user):
        try:
            display = source_get(caller.tenant, credential.source_name).display_name
        except SourceMissing:
            display = credential.source_name
        rows.append({"credential": credential, "display_name": display})
    return render(request, "approvals/connected_accounts.html", {"rows": rows, "page": "accounts"})


@member_required
@require_POST
def disconnect(request: HttpRequest, source_name: str) -> HttpResponse:
    caller = _caller(request)
    try:
        source = source_get(caller.tenant, source_name)
    except SourceMissing:
        source = None
    if credential_revoke(tenant=caller.tenant, user=caller.user, source=source, source_name=source_name):
        messages.success(request, f"Disconnected {source.display_name if source else source_name}.")
    else:
        messages.error(request, "Not found: you have no such connected account.")
    return redirect("oauth:connected_accounts")


@member_required
@require_POST
def sign_in_again(request: HttpRequest, pause_id: str) -> HttpResponse:
    """A new sign-in for one of the person's open tool_oauth pauses (after its flow expired)."""
    try:
        url = flow_restart(tenant=_caller(request).tenant, user=_caller(request).user, pause_id=pause_id)
    except FlowGone as gone:
        messages.error(request, str(gone))
        return redirect("approvals:inbox")
    except SourceMissing as missing:  # removed by an admin since the run paused
        return respond(request, Outcome(502, "exchange_failed", "Provider not configured", str(missing)))
    # A link, not a redirect: the pages' CSP (form-action 'self') rightly stops a form post
    # from being redirected to another origin.
    outcome = Outcome(200, "", "Sign in again", "A new sign-in is ready.", authorize_url=url)
    return render(request, "approvals/oauth_callback.html", {"outcome": outcome})
