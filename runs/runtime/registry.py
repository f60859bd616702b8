"""Agents (a planner factory and the tools it may call), registered by id."""

from collections.abc import Callable
from dataclasses import dataclass

from .planner import Planner
from .tools import Tool


@dataclass(frozen=True)
class Agent:
    id: str
    description: str
    planner: Callable[[], Planner]
    tools: dict[str, Tool]


_agents: dict[str, Agent] = {}


def register_agent(agent: Agent) -> Agent:
    _agents[agent.id] = agent
    return agent


def unregister_agent(agent_id: str) -> None:
    _agents.pop(agent_id, None)


def agent_exists(agent_id: str) -> bool:
    return agent_id in _agents


def get_agent(agent_id: str) -> Agent:
    return _agents[agent_id]


def all_agents() -> list[Agent]:
    return sorted(_agents.values(), key=lambda a: a.id)
