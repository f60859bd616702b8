import pytest

from tests.travel_desk import polling_desk, travel_desk  # noqa: F401  (live desk fixtures)


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARBOR_A2A_ATTEMPTS", "3")
    monkeypatch.setenv("HARBOR_A2A_BACKOFF_SECONDS", "0.1")
