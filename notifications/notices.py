"""What a notification tells: a pause that was requested, decided or expired, in plain words
and with the path of the page that shows it."""

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Protocol, Self

# The inbox card of a pause (approvals.web), as the notification.pause_requested event's
# Deeplink names it: channels add their site's address.
PAUSE_LINK = "/inbox/#pause-{pause_id}"


class NoticeKind(StrEnum):
    PAUSE_REQUESTED = "pause_requested"
    PAUSE_DECIDED = "pause_decided"
    PAUSE_EXPIRED = "pause_expired"


class PauseLike(Protocol):
    """What a notice reads of a pause (approvals.models.Pause, which this package does not import)."""

    pk: Any
    tenant_id: Any
    run_id: Any


@dataclass(frozen=True)
class Notice:
    kind: NoticeKind
    tenant_id: int
    pause_id: str
    run_id: str
    summary: str  # one short line in plain words, never a token or a credential
    link: str  # a path: the pause's page

    @classmethod
    def about(cls, kind: NoticeKind, pause: PauseLike, summary: str) -> Self:
        return cls(
            kind=kind,
            tenant_id=pause.tenant_id,
            pause_id=str(pause.pk),
            run_id=str(pause.run_id),
            summary=summary,
            link=PAUSE_LINK.format(pause_id=pause.pk),
        )

    @property
    def key(self) -> str:
        """The same on every attempt at this notice: a channel's idempotency key."""
        return f"{self.kind}:{self.pause_id}"

    def as_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Self:
        return cls(**{**payload, "kind": NoticeKind(payload["kind"])})
