"""Which remote agent a name means for a tenant: an admin's row first, then the
environment (HARBOR_A2A_AGENTS="travel-desk=http://127.0.0.1:8002,other=https://…"), which
applies to every tenant."""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RemoteAgent:
    name: str
    card_url: str
    auth_header: str = ""

    def __repr__(self) -> str:  # the credential never reaches a log line
        return f"RemoteAgent({self.name!r}, {self.card_url!r})"


class UnknownRemoteAgent(LookupError):
    pass


def from_environment() -> dict[str, RemoteAgent]:
    agents = {}
    for entry in os.environ.get("HARBOR_A2A_AGENTS", "").split(","):
        name, _, url = entry.strip().partition("=")
        if name and url:
            agents[name.strip()] = RemoteAgent(name=name.strip(), card_url=url.strip())
    return agents


def remote_agent_for(tenant_id: int, name: str) -> RemoteAgent:
    from .models import RemoteAgent as Row  # the model, only when a tool asks

    row = Row.objects.filter(tenant_id=tenant_id, name=name).first()
    if row is not None:
        return RemoteAgent(name=row.name, card_url=row.card_url, auth_header=row.auth_header)
    configured = from_environment().get(name)
    if configured is None:
        raise UnknownRemoteAgent(f"no remote agent named {name!r} is configured for this tenant")
    return configured
