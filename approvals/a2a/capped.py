"""The error a remote agent's answer over HARBOR_A2A_MAX_RESPONSE_BYTES raises
(approvals.capped_http cuts it off there)."""

from .failures import RemoteAgentFailed


class ResponseTooLarge(RemoteAgentFailed):
    """A response ran past the byte cap."""
