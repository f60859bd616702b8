"""GET /v1/tools/oauth/callback (PROTOCOL §6): where the provider sends the person back.
Every outcome is a page a person can read and a protocol error code a program can branch
on (JSON for any client that does not ask for HTML, as a browser does)."""

import logging
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from runs.kernel.errors import HarborError
from runs.protocol.errors import method_not_allowed
from runs.web.access import web_caller

from . import client
from .completion import FlowGone, flow_abandon, flow_claim, flow_complete, flow_deny, flow_release
from .flows import begun_here, flow_expired, flow_find, split_state
from .models import OAuthFlow
from .sealing import Unsealable, unseal
from .sources import Source, SourceMissing, source_get

log = logging.getLogger("harbor.oauth")


@dataclass
class Outcome:
    status: int
    code: str
    title: str
    message: str
    source: str = ""
    run_id: str = ""
    pause_id: str = ""
    authorize_url: str = ""


UNKNOWN = Outcome(404, "flow_not_found", "Unknown sign-in", "This sign-in is unknown or was already used.")
NOT_YOURS = Outcome(400, "state_mismatch", "Not your sign-in", "This sign-in was started for someone else.")


def is_flows_person(request: HttpRequest, flow: OAuthFlow) -> bool:
    """Whether the signed-in person, in the tenant the pages show, is the flow's."""
    caller = web_caller(request)
    return caller is not None and caller.tenant.pk == flow.tenant_id and request.user.pk == flow.user_id


def respond(request: HttpRequest, outcome: Outcome) -> HttpResponse:
    """A page for a browser (which asks for HTML), JSON for any other client: nothing under
    /v1/ answers a program with an HTML error page."""
    if request.get_preferred_type(["application/json", "text/html"]) != "text/html":
        if outcome.status == 200:
            return JsonResponse({"status": "authorization_complete", "run": outcome.run_id, "source": outcome.source})
        body = {"code": outcome.code, "error": outcome.code, "message": outcome.message}
        return JsonResponse(body, status=outcome.status)
    return render(request, "approvals/oauth_callback.html", {"outcome": outcome}, status=outcome.status)


@never_cache
@csrf_exempt  # a GET only (the provider's redirect), whose one-time `state` is its CSRF guard
def oauth_callback(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        return method_not_allowed(request.method, allow="GET, HEAD")
    try:
        return respond(request, _handle(request))
    except Exception:  # a bug must still answer with the protocol's shape, never Django's page
        log.exception("OAuth callback failed")
        return respond(
            request, Outcome(500, "runtime_error", "Something went wrong", "The sign-in could not be completed.")
        )


def _handle(request: HttpRequest) -> Outcome:
    returned, code, error = (request.GET.get(name, "") for name in ("state", "code", "error"))
    if not returned or not (code or error):
        return Outcome(400, "invalid_request", "Incomplete sign-in", "The provider's answer lacks its state or code.")
    state, nonce = split_state(returned)
    flow = flow_find(state)
    if flow is None:
        return UNKNOWN
    if not request.user.is_authenticated:
        return Outcome(401, "identity_required", "Sign in first", "Sign in to Harbor, then follow the link again.")
    if not is_flows_person(request, flow):
        log.warning("OAuth callback for flow %s by %s refused: another identity", flow.pk, request.user)
        return NOT_YOURS
    if not begun_here(request.session, flow, nonce):
        log.warning("OAuth callback for flow %s refused: not begun in this browser", flow.pk)
        return Outcome(
            400,
            "state_mismatch",
            "Not begun in this browser",
            "Sign-ins complete in the browser that began them: follow the sign-in link Harbor shows, here.",
        )
    try:
        source = source_get(flow.tenant, flow.source_name)
    except SourceMissing:
        return Outcome(502, "exchange_failed", "Provider not configured", f"The source {flow.source_name} is gone.")
    outcome = dict(source=source.display_name, run_id=flow.run_id)
    if flow_expired(flow):  # before anything is traded or denied
        return Outcome(
            410,
            "flow_expired",
            "Sign-in expired",
            "This sign-in took too long. The run still waits: start the sign-in again.",
            pause_id=flow.pause_id,
            **outcome,
        )
    if request.method == "HEAD":
        # A HEAD (a link checker, a prefetch) must change nothing: no denial, no claim, no trade.
        return Outcome(200, "", "Sign-in waiting", "Open this address to complete the sign-in.", **outcome)
    if error and error != "access_denied":
        # The provider failed the request itself (a bad scope, its own outage): not her refusal.
        return Outcome(
            502,
            "exchange_failed",
            "Sign-in failed",
            f"{source.display_name} could not complete the sign-in ({error[:100]}). The run still waits: "
            "try signing in again.",
            **outcome,
        )
    if error:
        try:
            flow_deny(flow=flow, source=source, error=error)
        except FlowGone as gone:
            return Outcome(404, "flow_not_found", "Unknown sign-in", str(gone))
        return Outcome(
            400,
            "authorization_denied",
            "Access denied",
            f"You did not allow access to {source.display_name}: the run has ended.",
            **outcome,
        )
    if not flow_claim(flow):  # a replay racing this one took it first
        return UNKNOWN
    try:
        token = client.exchange_code(
            source, code=code, verifier=unseal(flow.verifier_sealed), redirect_uri=flow.redirect_uri
        )
    except (client.ProviderRefused, Unsealable) as refused:
        flow_release(flow)
        log.warning("OAuth code exchange for flow %s refused: %s", flow.pk, refused)
        return _exchange_failed(
            "Sign-in failed",
            f"{source.display_name} refused to complete the sign-in ({refused}). The run still waits: "
            "try signing in again.",
            **outcome,
        )
    except client.ProviderSwamped as swamped:
        flow_release(flow)
        log.warning("OAuth code exchange for flow %s not attempted: %s", flow.pk, swamped)
        return _exchange_failed(
            "Too many sign-ins at once",
            f"{swamped}. The run still waits: try again in a moment.",
            **outcome,
        )
    except client.ProviderUnusable as unusable:
        flow_release(flow)
        log.warning("OAuth code exchange for flow %s gave no usable token: %s", flow.pk, unusable)
        return _exchange_failed(
            "Sign-in failed",
            f"{source.display_name} answered with nothing Harbor can keep ({unusable}). The run still waits: "
            "try signing in again.",
            **outcome,
        )
    except client.ProviderDown as down:
        flow_release(flow)
        log.warning("OAuth code exchange for flow %s failed: %s", flow.pk, down)
        return _exchange_failed(
            f"{source.display_name} is not answering",
            f"{down}. The run still waits: try signing in again in a moment.",
            **outcome,
        )
    except BaseException:
        flow_release(flow)  # an unforeseen failure: the sign-in can be made again
        raise
    try:
        flow_complete(flow=flow, source=source, token=token)
    except BaseException as failed:
        return _not_completed(flow, source, token, failed)
    return Outcome(
        200,
        "",
        "Authorization complete",
        f"You are signed in to {source.display_name}. The run goes on; you can close this page.",
        **outcome,
    )


def _exchange_failed(title: str, message: str, **outcome: str) -> Outcome:
    return Outcome(502, "exchange_failed", title, message, **outcome)


def _not_completed(flow: OAuthFlow, source: Source, token: dict, failed: BaseException) -> Outcome:
    """The tokens were traded but could not be kept: nothing holds them, so the provider is
    asked to forget them, and the flow is not left claimed."""
    if isinstance(failed, (FlowGone, HarborError)):
        # The run stopped waiting while the code was traded (a cancel won).
        flow_abandon(flow)
    else:
        flow_release(flow)  # an unforeseen failure: the sign-in can be made again
    for key in ("refresh_token", "access_token"):
        if token.get(key):
            client.revoke(source, token[key])
    if not isinstance(failed, (FlowGone, HarborError)):
        raise failed
    return Outcome(404, "flow_not_found", "Unknown sign-in", str(failed))
