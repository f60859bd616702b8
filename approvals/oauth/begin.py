"""Where a person begins a sign-in: GET /accounts/sign-in/begin/?state=… (the `AuthorizeURL`
a tool_oauth or a2a sign-in pause carries). Her browser, signed in to Harbor as the pausing
person, is sent on to the provider with the flow's state and a nonce kept only in her login
session (flows.begin_here). The callback accepts a code, or a denial, only with that nonce,
in that session: knowing the state does not let anyone else slip a code of theirs (an
account of theirs at the provider) or a denial into her browser, and nobody else can begin
her sign-in at all."""

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from . import client
from .callback import NOT_YOURS, UNKNOWN, Outcome, is_flows_person, respond
from .flows import begin_here, flow_expired, flow_find
from .sealing import Unsealable, unseal
from .sources import SourceMissing, source_get


@never_cache
@require_GET
def sign_in_begin(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    flow = flow_find(state)
    if flow is None:
        return respond(request, UNKNOWN)
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not is_flows_person(request, flow):
        return respond(request, NOT_YOURS)
    if flow_expired(flow):
        return respond(
            request,
            Outcome(
                410,
                "flow_expired",
                "Sign-in expired",
                "This sign-in took too long: start it again.",
                pause_id=flow.pause_id,
            ),
        )
    try:
        source = source_get(flow.tenant, flow.source_name)
        verifier = unseal(flow.verifier_sealed)
    except (SourceMissing, Unsealable):
        return respond(
            request, Outcome(502, "exchange_failed", "Provider not configured", "This sign-in cannot begin.")
        )
    taken = begin_here(request.session, flow, state)
    return HttpResponseRedirect(
        client.authorization_url(source, state=taken, verifier=verifier, redirect_uri=flow.redirect_uri)
    )
