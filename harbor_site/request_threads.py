"""The threads that run requests' sync code.

Django's ASGI handler starts a new thread for every request and ends it with the response.
Here a request borrows one of a fixed set of threads for its whole life instead: nothing to
start, and on SQLite the thread's database connection is still open from its last request
(CONN_MAX_AGE), where opening one costs more than a request's own queries. Requests beyond
the set wait for a thread, as on any threaded server."""

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from asgiref.sync import ThreadSensitiveContext


class RequestThreads:
    def __init__(self, size: int) -> None:
        self.size = size
        self._free: asyncio.LifoQueue[ThreadPoolExecutor] | None = None

    @asynccontextmanager
    async def borrowed(self) -> AsyncIterator[None]:
        """Run the block's thread-sensitive calls (the request's middleware, view and signals)
        on one borrowed thread: the one used last first, whose connection is warm."""
        if self._free is None:  # made on the server's loop, at its first request
            self._free = asyncio.LifoQueue()
            for index in reversed(range(self.size)):  # a thread starts at its first call, not here
                self._free.put_nowait(ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"harbor-request-{index}"))
        free = self._free
        executor = await free.get()
        try:
            async with ThreadSensitiveContext(executor=executor):
                yield
        except BaseException:
            # A request cut short (its client gone) may leave its call running on the
            # thread: the thread rejoins the set once idle, so no request queues behind it.
            idle = asyncio.get_running_loop().run_in_executor(executor, lambda: None)
            idle.add_done_callback(lambda _: free.put_nowait(executor))
            raise
        free.put_nowait(executor)
