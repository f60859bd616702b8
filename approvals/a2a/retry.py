"""Bounded retries with backoff for a remote agent that is unreachable or answers garbage.
Only transport and shape failures are retried; a remote agent's own answer (a task failed,
an unknown task) is not."""

import logging
import os
from collections.abc import Callable
from typing import TypeVar

import httpx
from a2a.client import A2AClientError

from .failures import RemoteAgentFailed
from .wire import RemoteGarbage

T = TypeVar("T")
log = logging.getLogger("harbor.a2a")

RETRYABLE = (A2AClientError, httpx.HTTPError, RemoteGarbage, OSError, ValueError)


class RemoteUnreachable(RemoteAgentFailed):
    """Every attempt failed: the message names the agent, the attempts and the last error."""


def attempts() -> int:
    return max(1, int(os.environ.get("HARBOR_A2A_ATTEMPTS", "3")))


def backoff_seconds(attempt: int) -> float:
    """0.5 s, 1 s, 2 s ... capped at 8 s."""
    base = float(os.environ.get("HARBOR_A2A_BACKOFF_SECONDS", "0.5"))
    return min(base * 2 ** (attempt - 1), 8.0)


def with_retries(name: str, operation: Callable[[], T], *, sleep: Callable[[float], None], total: int = 0) -> T:
    """`operation` must be safe to repeat (see delegate: every send first looks for itself).
    `total`: the attempts, if not HARBOR_A2A_ATTEMPTS."""
    total = total or attempts()
    for attempt in range(1, total + 1):
        try:
            return operation()
        except RETRYABLE as error:
            last = f"{type(error).__name__}: {error}"
            log.warning("remote agent %s, attempt %s of %s: %s", name, attempt, total, last)
            if attempt < total:
                sleep(backoff_seconds(attempt))
    raise RemoteUnreachable(f"remote agent {name} unreachable or not speaking A2A after {total} attempts ({last})")
