"""The demo agent `trip`: delegates the booking to the remote travel desk over A2A, and
answers with the desk's artifact."""

from runs.runtime.planner import CallTool, Finish, PlannerView
from runs.runtime.registry import Agent, register_agent
from runs.runtime.tools import Tool

from .delegate import delegate, facts

TRAVEL_DESK = "travel-desk"
# The remote agent's name and what it is asked.
DELEGATE_ARGUMENTS = {
    "type": "object",
    "properties": {"agent": {"type": "string", "minLength": 1}, "request": {"type": "string"}},
    "required": ["agent", "request"],
    "additionalProperties": False,
}


class TripPlanner:
    def decide(self, view: PlannerView) -> CallTool | Finish:
        if not view.history:
            return CallTool("delegate", {"agent": TRAVEL_DESK, "request": view.query})
        return Finish(view.history[-1]["result"]["Artifact"])


register_agent(
    Agent(
        id="trip",
        description='Books a trip through the remote travel desk (A2A): "Book a flight to Lisbon"'
        ' (or "... needs auth", "... will fail", "... will be rejected", "... is slow").',
        planner=TripPlanner,
        tools={"delegate": Tool("delegate", delegate, facts=facts, arguments=DELEGATE_ARGUMENTS)},
    )
)
