"""The open SSE streams one person may hold on this process (HARBOR_SSE_MAX_PER_USER), as
their websockets are bounded: past it a stream is refused with 429 rate_limited."""

from collections import Counter

from django.conf import settings

from runs.kernel.errors import RateLimited

RETRY_MS = 3000  # the reconnect delay a stream asks for (SSE `retry:`), and a refusal's Retry-After

# Streams each person holds open on this process (its one event loop: no lock). Each costs
# reads and a share of every push: the streams one person may open are bounded, as their
# websockets are (HARBOR_SSE_MAX_PER_USER).
_open_by_user: Counter[int] = Counter()


class StreamSlot:
    """One person's place among their open streams, given back once, whichever way the
    stream ends (finished, the client gone, or never started and collected)."""

    def __init__(self, user_id: int) -> None:
        self.user_id: int | None = user_id
        _open_by_user[user_id] += 1

    def release(self) -> None:
        if self.user_id is not None:
            _open_by_user[self.user_id] -= 1
            if not _open_by_user[self.user_id]:
                del _open_by_user[self.user_id]
            self.user_id = None


def take_stream_slot(user_id: int) -> StreamSlot:
    limit = int(getattr(settings, "HARBOR_SSE_MAX_PER_USER", 50))
    if _open_by_user[user_id] >= limit:
        refused = RateLimited(f"this person already holds {limit} open event streams; close one or retry later")
        refused.retry_after = RETRY_MS // 1000  # type: ignore[attr-defined]  # read by harbor_error_response
        raise refused
    return StreamSlot(user_id)
