"""The agents the benchmarks register: ordinary agents, as any deployment registers its own."""

from runs.runtime.planner import CallTool, Decision, Finish, PlannerView
from runs.runtime.registry import Agent, agent_exists, register_agent
from runs.runtime.tools import Tool, ToolContext

ONE_GATE = "bench_gate"  # the live benchmark's runs: one gated call, then done


def _launch(args: dict, ctx: ToolContext) -> dict:
    return {"ok": True}


def gated_agent(gates: int) -> str:
    """The id of an agent whose planner asks for `gates` gated calls in a row, then
    finishes (registered on first use)."""
    agent_id = ONE_GATE if gates == 1 else f"bench_gates_{gates}"
    if agent_exists(agent_id):
        return agent_id

    class Planner:
        def decide(self, view: PlannerView) -> Decision:
            done = len(view.history)
            return CallTool("launch", {"gate": done + 1}) if done < gates else Finish("done")

    register_agent(
        Agent(
            id=agent_id,
            description=f"{gates} gated calls in a row",
            planner=Planner,
            tools={"launch": Tool("launch", _launch, approval="always")},
        )
    )
    return agent_id


gated_agent(1)
