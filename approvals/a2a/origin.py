"""Where an agent's calls may go, and where its credential may: its card names the JSON-RPC
URL the SDK then calls, and a card is the agent's own word. The URL must be on the card's
origin (or a host an admin allowed, HARBOR_A2A_ALLOWED_HOSTS), and the Authorization header
goes to the card's origin only, whatever the card says."""

from collections.abc import Generator

import httpx
from a2a.types import AgentCard
from a2a.utils.constants import TransportProtocol
from django.conf import settings

from .failures import RemoteAgentFailed


class OffOrigin(RemoteAgentFailed):
    """The card sends calls to a host that is not the card's own nor allowed."""


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, port


def check_card(card: AgentCard, card_url: httpx.URL, agent_name: str) -> None:
    """Raise OffOrigin if any JSON-RPC interface of the card is off the card's origin."""
    allowed = set(settings.HARBOR_A2A_ALLOWED_HOSTS)
    for interface in card.supported_interfaces:
        if interface.protocol_binding != TransportProtocol.JSONRPC:
            continue  # never called: the client speaks JSON-RPC only
        target = httpx.URL(interface.url)
        if origin(target) == origin(card_url):
            continue
        if target.host in allowed or f"{target.host}:{target.port}" in allowed:
            continue
        raise OffOrigin(
            f"remote agent {agent_name}: its card sends calls to {target.scheme}://{target.netloc.decode()},"
            f" not to the card's own origin {card_url.scheme}://{card_url.netloc.decode()}; refused"
            " (an admin may allow that host in HARBOR_A2A_ALLOWED_HOSTS)"
        )


class OriginBoundAuth(httpx.Auth):
    """The agent's Authorization header, on requests to the card's origin only."""

    def __init__(self, header: str, card_url: httpx.URL) -> None:
        self._header, self._origin = header, origin(card_url)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self._header and origin(request.url) == self._origin:
            request.headers["Authorization"] = self._header
        yield request
