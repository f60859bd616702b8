"""The embedded default's deliverer: a commit's nudge drains the outbox on a thread of this
process, after the commit, never on the committing thread.

The embedded worker pool may take the drains on its own threads (`use_embedded_runner`);
until it does, a small executor of the outbox's own runs them: one thread, at most one
drain waiting behind the one running, however many commits nudge. A drain never waits for
a retry: a failed attempt is due again later, and the next nudge, or the runtime's periodic
sweep, delivers it."""

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections

from outbox.delivery import deliver_due

log = logging.getLogger("harbor.outbox")

Job = Callable[[], None]
Runner = Callable[[Job], object]  # runs a job soon, on a thread other than the caller's

_lock = threading.Lock()
_queued = False  # a drain is waiting to start: a nudge meanwhile adds nothing
_runner: Runner | None = None
_executor: ThreadPoolExecutor | None = None


def use_embedded_runner(runner: Runner | None) -> None:
    """Run the outbox's drains with `runner` (the embedded pool's "run this soon"); None
    gives them back to the outbox's own executor."""
    global _runner
    _runner = runner


def nudge() -> None:
    """Have a drain run soon (the "thread" executor's nudge)."""
    global _queued
    with _lock:
        if _queued:
            return
        _queued = True
        run = _runner or _own_executor().submit
    try:
        run(drain)
    except Exception:
        with _lock:
            _queued = False
        raise


def drain() -> None:
    """One drain, as a job of whichever thread runs it: its failures are logged, and its
    database connection is handed back as a worker's is after each job."""
    global _queued
    with _lock:
        _queued = False  # a commit from now on needs a look of its own: this one may have passed it
    try:
        deliver_due()
    except Exception:
        log.exception("outbox drain failed; the next nudge or sweep tries again")
    finally:
        close_old_connections()


def _own_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harbor-outbox")
    return _executor
