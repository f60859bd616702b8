"""HTTP to an OAuth provider with bounds a peer cannot stretch: a total deadline (connect,
send and the whole answer, however slowly it trickles) and a cap on the answer's size.

httpx's own timeouts are per operation, so a peer sending a byte every second never trips
them; the deadline is asyncio's, which cancels the call wherever it waits and closes its
connection. The cap is counted as the body streams in, before anything is parsed."""

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import httpx
from django.conf import settings

from approvals.capped_http import CappedTransport

T = TypeVar("T")


class AnswerTooLarge(Exception):
    """The provider's answer outgrew HARBOR_OAUTH_MAX_RESPONSE_BYTES."""


class DeadlinePassed(Exception):
    """The provider did not finish answering within HARBOR_OAUTH_CALL_SECONDS."""


def client_options() -> dict:
    """What every provider client is built with: the cap, and httpx's per-operation
    timeouts no longer than the whole deadline."""
    return {
        "transport": CappedTransport(settings.HARBOR_OAUTH_MAX_RESPONSE_BYTES, AnswerTooLarge),
        "timeout": httpx.Timeout(settings.HARBOR_OAUTH_CALL_SECONDS),
        "follow_redirects": False,
    }


def within_deadline(call: Callable[[], Awaitable[T]]) -> T:
    """Run an async provider call from sync code, cancelled once HARBOR_OAUTH_CALL_SECONDS
    have passed (DeadlinePassed)."""

    async def bounded() -> T:
        try:
            return await asyncio.wait_for(call(), timeout=settings.HARBOR_OAUTH_CALL_SECONDS)
        except TimeoutError:
            raise DeadlinePassed(
                f"the provider did not answer within {settings.HARBOR_OAUTH_CALL_SECONDS:g} seconds"
            ) from None

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case: a request thread or a worker, with no loop of its own
        return _on_a_loop_of_its_own(bounded)
    # Called on a thread that runs an event loop: the call gets a thread of its own.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="harbor-oauth-call") as pool:
        return pool.submit(_on_a_loop_of_its_own, bounded).result()


def _on_a_loop_of_its_own(call: Callable[[], Awaitable[T]]) -> T:
    # Not asyncio.run: it waits for the loop's executor, where a name lookup the deadline
    # cancelled may still run; closing the loop leaves that lookup to end on its own.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(call())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
