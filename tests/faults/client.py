"""What the fault tests do to a topology, as a client would: start runs, decide pauses,
follow the event stream over SSE and websockets (reconnecting with their cursors), and
read back the durable record (runs, pauses, the event log, the tool-call ledger)."""

import json
import threading
import time
from collections import Counter, defaultdict
from urllib.parse import urlsplit

import httpx
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import connect

TERMINAL = ("complete", "failed", "cancelled")
# A decision the server could not take right now and says so: the client retries it.
RETRYABLE_STATUSES = (429, 502, 503, 504)


def start_run(api: httpx.Client, query: str, agent_id: str) -> str:
    response = api.post("/v1/control/start", json={"identity": {}, "query": query, "agent_id": agent_id})
    assert response.status_code == 200, response.text
    return response.json()["task_id"]


def runs_status(topo, run_ids) -> dict[str, str]:
    return dict(topo.sql("SELECT id, status FROM runs_run WHERE id = ANY(%s)", (list(run_ids),)))


def wait_runs(topo, run_ids, status: str = "complete", timeout: float = 60) -> None:
    """Wait until every run has `status`; a run ending otherwise fails at once."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = runs_status(topo, run_ids)
        wrong = {r: s for r, s in statuses.items() if s in TERMINAL and s != status}
        assert not wrong, f"runs ended {wrong}: {failures(topo, wrong)}"
        if len(statuses) == len(set(run_ids)) and all(s == status for s in statuses.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not all runs reached {status} in {timeout}s: {Counter(statuses.values())}")
        time.sleep(0.25)


def failures(topo, run_ids) -> list:
    return topo.sql("SELECT id, failure_code, failure_message FROM runs_run WHERE id = ANY(%s)", (list(run_ids),))


def open_pauses(api: httpx.Client, run_ids) -> list[dict]:
    run_ids, snapshots = list(run_ids), []
    for chunk in range(0, len(run_ids), 50):  # a filter list holds at most 50 items (payload bounds)
        response = api.post(
            "/v1/pause/list",
            json={"identity": {}, "filter": {"run_ids": run_ids[chunk : chunk + 50]}, "page_size": 200},
        )
        assert response.status_code == 200, response.text
        snapshots += response.json()["snapshots"]
    return snapshots


def wait_open_pauses(api: httpx.Client, run_ids, count: int, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        snapshots = open_pauses(api, run_ids)
        if len(snapshots) >= count:
            return snapshots
        assert time.monotonic() < deadline, f"{len(snapshots)} of {count} pauses opened in {timeout}s"
        time.sleep(0.2)


def approve(api: httpx.Client, run: str, token: str) -> httpx.Response:
    return api.post("/v1/control/approve", json={"identity": {"run": run}, "payload": {"token": token}})


def approve_until_answered(
    api: httpx.Client, run: str, token: str, timeout: float = 30
) -> list[tuple[int | str, object]]:
    """Send one decision the way a careful client does: retry while the server answers a
    retryable error or the connection fails. Returns every answer, as (status, code)."""
    answers: list[tuple[int | str, object]] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = approve(api, run, token)
            answers.append((response.status_code, _code(response)))
            if response.status_code not in RETRYABLE_STATUSES:
                return answers
        except httpx.TransportError as error:
            answers.append(("transport", type(error).__name__))
        if time.monotonic() > deadline:
            return answers
        time.sleep(0.3)


def _code(response: httpx.Response):
    try:
        return response.json().get("code")
    except ValueError:
        return response.text[:80]


def decision_landed(answers: list | None) -> bool:
    """One decision landed: answered 200, or 409 already_resumed only after an earlier
    attempt that may have landed (a retryable error or a dropped connection)."""
    if not answers:  # never sent, or never answered
        return False
    final = answers[-1]
    if final[0] == 200:
        return True
    return final == (409, "already_resumed") and len(answers) > 1


# --- the durable record -------------------------------------------------------------------


def event_log(topo, run_ids, after: int = 0) -> list[tuple[int, str, str]]:
    """(sequence, type, run) of the runs' events in the log, in sequence order."""
    return topo.sql(
        "SELECT sequence, type, run_id FROM runs_event WHERE run_id = ANY(%s) AND sequence > %s ORDER BY sequence",
        (list(run_ids), after),
    )


def event_head(topo, tenant: str = "acme") -> int:
    return topo.sql("SELECT event_sequence FROM runs_tenant WHERE slug = %s", (tenant,))[0][0]


def ledger(topo, run_ids) -> list[tuple]:
    """(run, step, attempt, tool, outcome) of every tool-body execution."""
    return topo.sql(
        "SELECT run_id, step, attempt, tool, outcome FROM runs_toolcall WHERE run_id = ANY(%s) "
        "ORDER BY run_id, step, attempt",
        (list(run_ids),),
    )


def ledger_problems(rows, run_ids, steps: int, lost_allowed=frozenset()) -> list[str]:
    """Exactly-once, as the ledger shows it: each of the `steps` steps of every run has one
    `completed` row, its last attempt; any earlier attempt is `lost`, and only at a
    (run, step) in `lost_allowed` (a step in flight when its worker was killed)."""
    by_step = defaultdict(list)
    for run, step, attempt, _tool, outcome in rows:
        by_step[(run, step)].append((attempt, outcome))
    problems = []
    for run in run_ids:
        done = sorted(step for (r, step) in by_step if r == run)
        if done != list(range(steps)):
            problems.append(f"run {run}: ledger has steps {done}, expected 0..{steps - 1}")
    for (run, step), attempts in sorted(by_step.items()):
        outcomes = [outcome for _, outcome in sorted(attempts)]
        if outcomes.count("completed") != 1 or outcomes[-1] != "completed":
            problems.append(f"run {run} step {step}: attempts {outcomes}, expected exactly one completed, last")
        extra = outcomes[:-1]
        if any(o != "lost" for o in extra):
            problems.append(f"run {run} step {step}: a retry after {extra}, only a lost attempt may be retried")
        if extra and (run, step) not in lost_allowed:
            problems.append(f"run {run} step {step}: attempts {outcomes} though no worker died during it")
    return problems


# --- live streams ---------------------------------------------------------------------------


class _Follower(threading.Thread):
    """Follows a stream in the background, reconnecting after any break with its cursor."""

    def follow(self) -> None:
        raise NotImplementedError  # SSE or websocket

    def __init__(self, cursor: int | None) -> None:
        super().__init__(daemon=True)
        self.cursor = cursor
        self.received: list[dict] = []  # envelopes, in arrival order
        self.connections = 0
        self.breaks: list[str] = []
        self.malformed: list[str] = []  # frames that break the protocol's framing
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.follow()
            except Exception as error:  # a break of any kind: note it and reconnect
                self.breaks.append(f"{type(error).__name__}: {error}"[:200])
            if not self.stopping.is_set():
                time.sleep(0.3)

    def take(self, envelope: dict) -> None:
        self.received.append(envelope)
        self.cursor = envelope["sequence"]

    def sequences(self, run_ids=None) -> list[int]:
        return [e["sequence"] for e in list(self.received) if run_ids is None or e["run"] in run_ids]

    def wait_for(self, predicate, timeout: float = 20) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(list(self.received)):
                return True
            time.sleep(0.1)
        return False

    def wait_connected(self, count: int = 1, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.connections < count:
            assert time.monotonic() < deadline, f"stream did not connect: {self.breaks[-3:]}"
            time.sleep(0.05)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=3)


class SseFollower(_Follower):
    """GET /v1/events; after a break, reconnects with Last-Event-ID (PROTOCOL §5)."""

    def __init__(self, url: str, token: str, cursor: int | None) -> None:
        super().__init__(cursor)
        self.url, self.token = url, token

    def follow(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"}
        if self.cursor is not None:
            headers["Last-Event-ID"] = str(self.cursor)
        with httpx.stream(
            "GET", f"{self.url}/v1/events", headers=headers, timeout=httpx.Timeout(5, read=40)
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"SSE answered {response.status_code}")
            self.connections += 1
            frame: dict[str, str] = {}
            for line in response.iter_lines():
                if self.stopping.is_set():
                    return
                if line == "":
                    if "data" in frame and "id" in frame:
                        envelope = json.loads(frame["data"])
                        if (str(envelope["sequence"]), envelope["type"]) != (frame["id"], frame.get("event")):
                            self.malformed.append(repr(frame)[:300])
                        self.take(envelope)
                    frame = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(":")
                    frame[name] = value[1:] if value.startswith(" ") else value
        raise ConnectionError("the server ended the stream")


class WsFollower(_Follower):
    """The inbox socket /ws/events/ of a signed-in person; after a break, reconnects with
    ?after=<last sequence> (PROTOCOL §5)."""

    def __init__(self, url: str, cookies: httpx.Cookies, cursor: int | None) -> None:
        super().__init__(cursor)
        self.url = url
        self.cookie = "; ".join(f"{name}={value}" for name, value in cookies.items())
        self.close_codes: list = []

    def follow(self) -> None:
        parts = urlsplit(self.url)
        query = f"?after={self.cursor}" if self.cursor is not None else ""
        try:
            with connect(
                f"ws://{parts.netloc}/ws/events/{query}",
                open_timeout=5,
                close_timeout=1,
                additional_headers={"Cookie": self.cookie, "Origin": self.url},
            ) as socket:
                self.connections += 1
                while not self.stopping.is_set():
                    try:
                        message = socket.recv(timeout=0.5)
                    except TimeoutError:
                        continue
                    self.take(json.loads(message))
        except ConnectionClosed as closed:
            self.close_codes.append(closed.rcvd.code if closed.rcvd else None)
            raise
        except InvalidStatus as refused:
            self.close_codes.append(refused.response.status_code)
            raise
        except InvalidHandshake:
            raise
