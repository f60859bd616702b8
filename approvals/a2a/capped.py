"""An httpx transport that reads at most a given number of bytes of any one response, so a
remote agent cannot fill the worker's memory: a declared length over the cap is refused
before the body is read, and a body that runs past it (chunked, a stream) is cut off there."""

from collections.abc import AsyncIterator

import httpx

from .failures import RemoteAgentFailed
from .limits import size


class ResponseTooLarge(RemoteAgentFailed):
    """A response ran past the byte cap."""


class _Counted(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, limit: int, url: str) -> None:
        self._stream, self._limit, self._url = stream, limit, url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise ResponseTooLarge(f"the answer from {self._url} ran past {size(self._limit)}")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class CappedTransport(httpx.AsyncBaseTransport):
    def __init__(self, limit: int) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        url = f"{request.url.scheme}://{request.url.netloc.decode()}{request.url.path}"
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._limit:
            await response.aclose()
            raise ResponseTooLarge(f"the answer from {url} is {size(int(declared))}, over {size(self._limit)}")
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Counted(response.stream, self._limit, url),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
