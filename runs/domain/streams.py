"""The live tail shared by the SSE stream and the websockets.

What a stream sends comes only from the durable log, read by sequence after the stream's
cursor: sequences are allocated under the tenant row's lock and committed in that order, so
a read by `sequence > cursor` never skips a late commit, and a single cursor never sends an
event twice. The channel layer only nudges ("the log grew"); nudges may be dropped (a full
inbox, a Redis restart) and a stream then catches up on its next read. `Tail` listens for
nudges without ever depending on the layer: while it fails, the stream polls the log."""

import asyncio
import logging

from channels.layers import BaseChannelLayer
from django.conf import settings

from approvals.domain.selectors import token_visibility
from runs.domain import events, selectors
from runs.domain.event_types import Envelope
from runs.identity.callers import Caller

log = logging.getLogger("harbor.streams")

BATCH = 200


def read_after(
    *,
    caller: Caller,
    cursor: int,
    run_id: str | None = None,
    types: frozenset[str] | None = None,
    tenant_wide: bool = False,
) -> tuple[list[Envelope], int]:
    """The envelopes of the next visible events after `cursor`, and the new cursor. When the
    batch is not full, every event up to the head read first has been seen, so the cursor
    moves past invisible ones too. Tokens are re-checked here, at send time."""
    head = selectors.events_head(tenant_id=caller.tenant.pk)
    batch = selectors.events_after(
        caller=caller, after=cursor, run_id=run_id, types=types, tenant_wide=tenant_wide, limit=BATCH
    )
    may_see_token = token_visibility(caller=caller, pause_ids=[e.payload.get("_pause") for e in batch])
    envelopes = [
        events.envelope(e, tenant_slug=caller.tenant.slug, with_tokens=may_see_token(e.payload.get("_pause")))
        for e in batch
    ]
    new_cursor = batch[-1].sequence if batch else cursor
    if len(batch) < BATCH:
        new_cursor = max(new_cursor, head)
    return envelopes, new_cursor


def poll_seconds() -> float:
    """How often a stream reads the log while the channel layer is failing."""
    return float(getattr(settings, "HARBOR_STREAM_POLL_SECONDS", 1.0))


class Tail:
    """A channel's group memberships that survive a channel-layer outage."""

    JOIN_TIMEOUT = 2.0

    def __init__(self, layer: BaseChannelLayer, channel: str) -> None:
        self.layer, self.channel = layer, channel
        self.groups: list[str] = []
        self.up = True

    async def join(self, *groups: str) -> bool:
        """Join (or re-join: a restarted Redis forgot us, and memberships expire) the groups."""
        self.groups += [g for g in groups if g not in self.groups]
        try:
            for group in self.groups:
                await asyncio.wait_for(self.layer.group_add(group, self.channel), self.JOIN_TIMEOUT)
        except Exception:
            if self.up:
                log.warning("channel layer unavailable; %s polls the log", self.channel, exc_info=True)
            self.up = False
        else:
            if not self.up:
                log.info("channel layer is back for %s", self.channel)
            self.up = True
        return self.up

    async def next(self, timeout: float) -> dict | None:
        """The next message, or None after `timeout` (or sooner while the layer is failing):
        the caller then reads the log, which makes up for any nudge lost meanwhile."""
        if not self.up:
            await asyncio.sleep(min(timeout, poll_seconds()))
            await self.join()
            return None
        try:
            return await asyncio.wait_for(self.layer.receive(self.channel), timeout)
        except TimeoutError:
            await self.join()  # a quiet spell, or a receive that hangs: re-join either way
        except Exception:
            log.warning("channel layer receive failed; %s polls the log", self.channel, exc_info=True)
            self.up = False
        return None

    async def leave(self) -> None:
        for group in self.groups:
            try:
                await asyncio.wait_for(self.layer.group_discard(group, self.channel), self.JOIN_TIMEOUT)
            except Exception:  # the stream is gone either way; memberships expire
                log.debug("group_discard failed for %s", self.channel, exc_info=True)
