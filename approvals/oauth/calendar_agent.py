"""The demo agent `calendar`: reads the run owner's calendar from the tenant's `calendar`
OAuth source with her own token, asking her to sign in the first time."""

from runs.runtime.planner import CallTool, Finish, PlannerView
from runs.runtime.registry import Agent, register_agent
from runs.runtime.tools import Tool, ToolContext

from .tool import oauth_get

SOURCE = "calendar"


def _read_calendar(args: dict, ctx: ToolContext) -> dict:
    body = oauth_get(ctx, SOURCE, "/api/calendar/events")
    return {"owner": body.get("owner", ""), "events": body.get("events", [])[:20]}


class CalendarPlanner:
    def decide(self, view: PlannerView) -> CallTool | Finish:
        done = [entry for entry in view.history if entry.get("tool") == "read_calendar"]
        if not done:
            return CallTool("read_calendar", {})
        events = done[-1]["result"]["events"]
        if not events:
            return Finish("Your calendar is empty.")
        listed = "; ".join(f"{e['date']} {e['time']} {e['title']}" for e in events)
        return Finish(f"{len(events)} event(s) on your calendar: {listed}.")


def register() -> None:
    register_agent(
        Agent(
            id="calendar",
            description="Reads your calendar from an OAuth provider (asks you to sign in the first time).",
            planner=CalendarPlanner,
            tools={
                "read_calendar": Tool(
                    "read_calendar",
                    _read_calendar,
                    arguments={"type": "object", "properties": {}, "additionalProperties": False},  # none
                )
            },
        )
    )
