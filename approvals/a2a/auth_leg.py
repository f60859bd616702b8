"""When a remote task is auth-required and names an OAuth source this server knows for the
run's tenant, the pause is resolved by the tool-side OAuth leg (approvals.oauth): it
carries the source's sign-in (SourceName, AuthorizeURL, State, Scopes), the person signs in
at the provider, the callback stores her credential and resumes the pause, and the same
call answers the remote task with her access token. Otherwise a `resume` carries the
credential the remote agent asked for.

Her token goes to the remote agent only after she signed in for that very request: an
agent that names a source gets no token without her consent at the provider."""

from approvals.oauth.credentials import access_token
from approvals.oauth.flows import PendingFlow, flow_begin
from approvals.oauth.models import OAuthFlow
from approvals.oauth.sources import Source, SourceMissing, source_get
from runs.models import Run

from .wire import RemoteTask


def known_oauth_source(run: Run, task: RemoteTask) -> Source | None:
    """The tenant's OAuth source the remote task names, or None."""
    if not task.oauth_source:
        return None
    try:
        return source_get(run.tenant, task.oauth_source)
    except SourceMissing:
        return None


def sign_in(run: Run, source: Source) -> tuple[dict, PendingFlow]:
    """The pause's sign-in fields and the flow to bind to it (PROTOCOL §4, tool.auth_required)."""
    pending = flow_begin(run=run, source=source)
    fields = {
        "SourceName": source.display_name,
        "AuthorizeURL": pending.authorize_url,
        "State": pending.state,
        "Scopes": list(source.scopes),
    }
    return fields, pending


def signed_in_token(run: Run, source_name: str, pause_id: str) -> str | None:
    """The run owner's access token for the source (refreshed if expired), if she signed in
    for this pause: a resume by anyone else sends nothing (the task asks again)."""
    if not OAuthFlow.objects.filter(pause_id=pause_id, outcome="completed").exists():
        return None
    try:
        source = source_get(run.tenant, source_name)
    except SourceMissing:
        return None
    return access_token(tenant=run.tenant, user=run.owner, source=source)
