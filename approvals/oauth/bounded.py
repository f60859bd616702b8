"""HTTP to an OAuth provider with bounds a peer cannot stretch: a total deadline (connect,
send and the whole answer, however slowly it trickles) and a cap on the answer's size.

httpx's own timeouts are per operation, so a peer sending a byte every second never trips
them; the deadline is asyncio's, which cancels the call wherever it waits and closes its
connection. The cap is counted as the body streams in, before anything is parsed."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar, cast

import httpx
from django.conf import settings

T = TypeVar("T")


class AnswerTooLarge(Exception):
    """The provider's answer outgrew HARBOR_OAUTH_MAX_RESPONSE_BYTES."""


class DeadlinePassed(Exception):
    """The provider did not finish answering within HARBOR_OAUTH_CALL_SECONDS."""


class _CappedBody(httpx.AsyncByteStream):
    def __init__(self, body: httpx.AsyncByteStream, cap: int) -> None:
        self.body, self.cap = body, cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        async for chunk in self.body:
            received += len(chunk)
            if received > self.cap:
                raise AnswerTooLarge(f"the provider's answer is larger than {self.cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.body.aclose()


class CappedTransport(httpx.AsyncBaseTransport):
    """httpx's transport, whose answers stop at `cap` bytes (a declared length over it is
    refused before the body is read)."""

    def __init__(self, cap: int) -> None:
        self.inner, self.cap = httpx.AsyncHTTPTransport(), cap

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.cap:
            await response.aclose()
            raise AnswerTooLarge(f"the provider's answer is larger than {self.cap} bytes")
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CappedBody(cast(httpx.AsyncByteStream, response.stream), self.cap),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def client_options() -> dict:
    """What every provider client is built with: the cap, and httpx's per-operation
    timeouts no longer than the whole deadline."""
    return {
        "transport": CappedTransport(settings.HARBOR_OAUTH_MAX_RESPONSE_BYTES),
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
