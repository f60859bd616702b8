"""The `tool_oauth` pause cause (PROTOCOL §4): a tool needs the run owner's sign-in at a
provider. The OAuth callback resumes it as the pausing identity (a denied sign-in closes it
as a reject); an admin may resume it too. Registered by approvals.oauth.apps."""

from approvals.causes import PauseCause
from approvals.models import Cause, Decision, Reason
from runs.domain import events
from runs.models import Role

TOOL_OAUTH = PauseCause(
    name=Cause.TOOL_OAUTH,
    reasons=frozenset({Reason.EXTERNAL_EVENT}),
    decisions=frozenset({Decision.RESUME}),
    deciders=frozenset({Role.ADMIN}),
    companions=frozenset({events.TOOL_AUTH_REQUIRED}),
    card_template="oauth/card.html",
    run_template="oauth/run_pause.html",
)
