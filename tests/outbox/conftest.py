"""A test kind of message whose handler records each attempt and fails as told, and a
nudger that counts the nudges commits send."""

import threading

import pytest

import outbox
from outbox import nudges

KIND = "test.record"


class Recorder:
    """The handler of KIND: records every attempt; the next `failures` attempts raise
    `error` instead of delivering."""

    def __init__(self) -> None:
        self.attempts: list[outbox.Delivery] = []
        self.delivered: list[str] = []  # keys
        self.failures = 0
        self.error: BaseException = ConnectionError("receiver down")
        self._lock = threading.Lock()

    def __call__(self, delivery: outbox.Delivery) -> None:
        with self._lock:
            self.attempts.append(delivery)
            if self.failures:
                self.failures -= 1
                raise self.error
            self.delivered.append(delivery.key)


@pytest.fixture
def recorder() -> Recorder:
    handler = Recorder()
    outbox.register(KIND, handler)
    return handler


@pytest.fixture
def nudged(settings) -> list[int]:
    """The nudges sent after commits, counted (an executor of the test's own)."""
    sent: list[int] = []
    nudges.register("test-outbox", lambda: sent.append(1))
    settings.HARBOR_EXECUTOR = "test-outbox"
    return sent
