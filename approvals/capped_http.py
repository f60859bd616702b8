"""An httpx transport that reads at most `limit` bytes of any one answer from a peer (a
remote agent, an OAuth provider), so a peer cannot fill a process's memory: a declared
length over the cap is refused before the body is read, and a body that runs past it
(chunked, a stream) is cut off there. Each peer kind raises its own error (`too_large`,
given the message), which its callers already turn into a clear outcome."""

from collections.abc import AsyncIterator, Callable
from typing import cast

import httpx

TooLarge = Callable[[str], Exception]
KIB = 1024
MIB = 1024 * KIB


def plain_size(count: int) -> str:
    """A byte count in plain words: 812 bytes, 64 KB, 20.0 MB."""
    if count >= MIB:
        return f"{count / MIB:.1f} MB"
    if count >= KIB:
        return f"{count // KIB} KB"
    return f"{count} bytes"


class _Counted(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, limit: int, too_large: Exception) -> None:
        self._stream, self._limit, self._too_large = stream, limit, too_large

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise self._too_large
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class CappedTransport(httpx.AsyncBaseTransport):
    def __init__(self, limit: int, too_large: TooLarge) -> None:
        self._inner, self._limit, self._too_large = httpx.AsyncHTTPTransport(), limit, too_large

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        url = f"{request.url.scheme}://{request.url.netloc.decode()}{request.url.path}"
        too_large = self._too_large(f"the answer from {url} is larger than {plain_size(self._limit)}")
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._limit:
            await response.aclose()
            raise too_large
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Counted(cast(httpx.AsyncByteStream, response.stream), self._limit, too_large),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
