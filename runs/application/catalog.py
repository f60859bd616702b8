"""What this deployment offers: the agents a run may start with (for the start form and the
OpenAPI document)."""

from runs.runtime.registry import Agent, all_agents


def agents_offered() -> list[Agent]:
    return all_agents()
