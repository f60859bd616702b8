"""What a tool calls for a person's access token. With a usable credential it returns the
token (refreshed if it had expired); without one it begins a sign-in flow and raises
ToolPause (cause tool_oauth, reason external_event, companion tool.auth_required), so the
runtime parks the run and the same call runs again once the person has signed in."""

from approvals.models import Cause, Reason
from runs.domain import events
from runs.models import Run
from runs.runtime.tools import ToolContext, ToolPause

from . import client
from .credentials import access_token
from .flows import flow_begin
from .sources import Source, source_get


def _pause_for_sign_in(run: Run, source: Source) -> ToolPause:
    pending = flow_begin(run=run, source=source)
    return ToolPause(
        cause=Cause.TOOL_OAUTH,
        reason=Reason.EXTERNAL_EVENT,
        payload={
            "SourceName": source.display_name,
            "AuthorizeURL": pending.authorize_url,
            "State": pending.state,
            "Scopes": list(source.scopes),
        },
        companion=events.TOOL_AUTH_REQUIRED,
        summary=f"Sign in to {source.display_name}",
        on_park=pending.bind,
    )


def oauth_token(ctx: ToolContext, source_name: str) -> tuple[Source, str]:
    """The run owner's access token for the tenant's source `source_name`, or a pause."""
    run = Run.objects.select_related("tenant", "owner").get(pk=ctx.run_id)
    source = source_get(run.tenant, source_name)
    token = access_token(tenant=run.tenant, user=run.owner, source=source)
    if token is None:
        raise _pause_for_sign_in(run, source)
    return source, token


def oauth_get(ctx: ToolContext, source_name: str, path: str) -> dict:
    """GET a path of the source's API as the run's owner. A token the API refuses (expired
    or revoked upstream) is refreshed once; if that fails too, the person signs in again."""
    source, token = oauth_token(ctx, source_name)
    response = client.api_get(source, path, token)
    if response.status_code == 401:
        run = Run.objects.select_related("tenant", "owner").get(pk=ctx.run_id)
        fresh = access_token(tenant=run.tenant, user=run.owner, source=source, force_refresh=True)
        if fresh is None:
            raise _pause_for_sign_in(run, source)
        response = client.api_get(source, path, fresh)
    _raise_for_status(response)
    return response.json()


def _raise_for_status(response: client.ApiAnswer) -> None:
    if response.status_code >= 400:
        raise RuntimeError(f"the API answered {response.status_code}")
