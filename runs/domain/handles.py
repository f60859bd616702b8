"""The process-local registry of live handles (sockets, files, clients, callbacks).

A handle survives a pause only inside the process that registered it; a resume anywhere
else finds its key missing and fails loudly (ErrToolContextLost)."""

import threading
import uuid

from runs.models import TERMINAL_RUN_STATUSES, Run

_lock = threading.Lock()
_handles: dict[str, object] = {}


def register(run_id: str, name: str, handle: object) -> str:
    key = f"{run_id}:{name}:{uuid.uuid4().hex}"
    with _lock:
        _handles[key] = handle
    return key


def lookup(key: str) -> object | None:
    with _lock:
        return _handles.get(key)


def release_run(run_id: str) -> None:
    """Drop (and close, where they can be) every handle a finished run held."""
    with _lock:
        keys = [k for k in _handles if k.startswith(f"{run_id}:")]
        released = [_handles.pop(k) for k in keys]
    for handle in released:
        close = getattr(handle, "close", None)
        if callable(close):
            try:
                close()
            except OSError:
                pass


def reap_ended() -> None:
    """Release the handles of runs that ended elsewhere (a cancel or a rejection handled by
    another process): the process holding a handle is the only one that can close it."""
    with _lock:
        run_ids = {key.split(":", 1)[0] for key in _handles}
    if not run_ids:
        return
    for run_id in Run.objects.filter(pk__in=run_ids, status__in=TERMINAL_RUN_STATUSES).values_list("pk", flat=True):
        release_run(run_id)
