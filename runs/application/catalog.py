"""What this deployment offers: the agents a run may start with (for the start form and the
OpenAPI document), and their tools (for the approval policy's schema)."""

from runs.runtime.registry import Agent, all_agents
from runs.runtime.tools import Tool


def agents_offered() -> list[Agent]:
    return all_agents()


def tools_offered() -> list[Tool]:
    """Every agent's tools, in agent order (agents may share a tool by name)."""
    return [tool for agent in all_agents() for tool in agent.tools.values()]
