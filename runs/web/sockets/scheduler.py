"""Which sockets read the log when: the reads of one event loop, batched on a thread of
their own, a crowd replaying one tenant's log taking its turn."""

import asyncio
import weakref
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from channels.db import database_sync_to_async

from runs.streams import reads as streams
from runs.web.sockets import reads
from runs.web.sockets.reads import Read, ReadResult

Pending = tuple[Read, "asyncio.Future[ReadResult]"]


class ReadScheduler:
    """The sockets' reads of one event loop, batched: those asked for while a batch runs on
    the database thread go together in the next one (no waiting added when idle).

    A socket far behind its tenant's head (one that reconnected after a while) replays the
    log a page at a time, and each page is a read of its own and a page of frames to send on
    the loop every socket shares. A batch takes at most REPLAYS_PER_TENANT such pages per
    tenant, the rest waiting their turn in order: a crowd replaying one tenant's log slows
    its own replays, not every other socket's deliveries and re-checks."""

    LIMIT = 500
    REPLAYS_PER_TENANT = 4
    # A read waits this long for others to join its batch: the sockets of a re-check slot
    # wake within a few loop turns of each other.
    GATHER_SECONDS = 0.005

    def __init__(self) -> None:
        self.pending: list[Pending] = []
        self.running = False
        self.heads: dict[int, int] = {}  # each tenant's head as the last batch saw it

    def saw_head(self, tenant_id: int, head: int) -> None:
        self.heads[tenant_id] = max(self.heads.get(tenant_id, 0), head)

    def _replaying(self, read: Read) -> bool:
        return read.log and self.heads.get(read.tenant_id, 0) - read.cursor > streams.BATCH

    def _next_batch(self) -> list[Pending]:
        batch: list[Pending] = []
        waiting: list[Pending] = []
        replays: Counter[int] = Counter()
        for read, future in self.pending:
            if future.done():  # a closed socket's
                continue
            replaying = self._replaying(read)
            if len(batch) >= self.LIMIT or (replaying and replays[read.tenant_id] >= self.REPLAYS_PER_TENANT):
                waiting.append((read, future))
                continue
            replays[read.tenant_id] += replaying
            batch.append((read, future))
        self.pending = waiting
        return batch

    async def read(self, read: Read) -> ReadResult:
        future: asyncio.Future[ReadResult] = asyncio.get_running_loop().create_future()
        self.pending.append((read, future))
        if not self.running:
            self.running = True
            asyncio.create_task(self._run())
        return await future

    async def _run(self) -> None:
        try:
            await asyncio.sleep(self.GATHER_SECONDS)
            while self.pending:
                batch = self._next_batch()
                if not batch:
                    continue
                try:
                    results = await database_sync_to_async(reads.read_many, thread_sensitive=False, executor=_READER)(
                        [read for read, _ in batch]
                    )
                except Exception as error:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for (read, future), result in zip(batch, results, strict=True):
                    self.saw_head(read.tenant_id, result[4])
                    if not future.done():
                        future.set_result(result)
        finally:
            self.running = False


# The sockets' reads (re-checks, replays, catch-ups) run on a thread of their own, not the one
# every connect's sign-in and permission check waits for: a crowd of sockets replaying a long
# log would otherwise hold up every other person's handshake past Daphne's timeout.
_READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harbor-ws-reader")
_schedulers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReadScheduler]" = weakref.WeakKeyDictionary()


def scheduler_of_loop() -> ReadScheduler:
    loop = asyncio.get_running_loop()
    scheduler = _schedulers.get(loop)
    if scheduler is None:
        scheduler = _schedulers[loop] = ReadScheduler()
    return scheduler
