"""The planner protocol: given what the run knows, decide the next step."""

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class CallTool:
    tool: str
    args: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RequestPause:
    """Signal a pause; the runtime mints it. `cause` is operator or a2a here (gates and
    OAuth pauses are raised by the tool policy and by tools)."""

    cause: str
    reason: str
    payload: dict = field(default_factory=dict)
    summary: str = ""


@dataclass(frozen=True)
class Finish:
    answer: str


Decision = CallTool | RequestPause | Finish


@dataclass(frozen=True)
class PlannerView:
    """What a planner sees at a step boundary, after steering has been applied."""

    run_id: str
    goal: str
    query: str
    step: int
    history: list[dict]  # [{"tool", "args", "result"}] of completed tool steps
    context: list[dict]
    messages: list[str]
    resumed: dict | None  # the decision that released the run's last planner pause


class Planner(Protocol):
    def decide(self, view: PlannerView) -> Decision: ...


def describe(decision: Decision) -> dict[str, str]:
    if isinstance(decision, CallTool):
        return {"Kind": "call_tool", "Tool": decision.tool}
    if isinstance(decision, RequestPause):
        return {"Kind": "request_pause", "Cause": decision.cause}
    return {"Kind": "finish"}
