"""When a remote task is auth-required: the hook for the tool-side OAuth leg.

A remote agent may name an OAuth source this server knows (by the source's name in its
status message or metadata). Resolving such a pause through the OAuth callback is the job
of the OAuth leg (approvals.oauth); until that leg registers itself here, every
auth-required pause is resolved by a `resume` carrying the credential the agent asked for."""

from collections.abc import Callable

from .directory import RemoteAgent
from .wire import RemoteTask

# Set by the OAuth leg: (agent, task) -> the name of a known OAuth source, or None.
source_for: Callable[[RemoteAgent, RemoteTask], str | None] = lambda agent, task: None  # noqa: E731


def known_oauth_source(agent: RemoteAgent, task: RemoteTask) -> str | None:
    return source_for(agent, task)
