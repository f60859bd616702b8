"""Built-in demo agents with deterministic, scripted planners: used by the demo, the docs
and the tests."""

import re
import socket
from typing import cast

from django.conf import settings

from approvals.models import Cause, Reason

from .planner import CallTool, Decision, Finish, PlannerView, RequestPause
from .registry import Agent, register_agent
from .tools import Tool, ToolContext

# --- deploy: a gated, side-effecting call whose arguments the approver may edit ------------

BUILD = {
    "type": "string",
    "title": "build name",
    "description": "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64",
    # An escaped "-" in the class: the same pattern is an edit field's HTML `pattern`, which
    # browsers read in the `v` mode that refuses a bare one.
    "pattern": "^[A-Za-z0-9][A-Za-z0-9._\\-]{0,63}$",
}
ENVIRONMENT = {"type": "string", "enum": ["staging", "production"]}
CHECK_BUILD_ARGUMENTS = {
    "type": "object",
    "properties": {"build": BUILD},
    "required": ["build"],
    "additionalProperties": False,
}
DEPLOY_ARGUMENTS = {
    "type": "object",
    "properties": {"build": BUILD, "environment": ENVIRONMENT},
    "required": ["build", "environment"],
    "additionalProperties": False,
}


def _check_build(args: dict, ctx: ToolContext) -> dict:
    return {"build": args["build"], "status": "green"}


def _deploy_to_production(args: dict, ctx: ToolContext) -> dict:
    return {"deployed": args["build"], "environment": args["environment"]}


class DeployPlanner:
    def decide(self, view: PlannerView) -> CallTool | Finish:
        done = {entry.get("tool"): entry for entry in view.history}
        if "check_build" not in done:
            build = re.search(r"\bbuild\s+([\w.\-]+)", view.goal)
            return CallTool("check_build", {"build": build.group(1) if build else "latest"})
        if "deploy_to_production" not in done:
            env = re.search(r"\bto\s+(\w+)", view.goal)
            return CallTool(
                "deploy_to_production",
                {"build": done["check_build"]["result"]["build"], "environment": env.group(1) if env else "production"},
            )
        result = done["deploy_to_production"]["result"]
        return Finish(f"Deployed build {result['deployed']} to {result['environment']}.")


register_agent(
    Agent(
        id="deploy",
        description="Checks a build, then deploys it behind a human approval gate.",
        planner=DeployPlanner,
        tools={
            "check_build": Tool("check_build", _check_build, arguments=CHECK_BUILD_ARGUMENTS),
            "deploy_to_production": Tool(
                "deploy_to_production",
                _deploy_to_production,
                approval="always",
                editable_args=True,
                gate_reason="deploying changes production",
                arguments=DEPLOY_ARGUMENTS,
            ),
        },
    )
)

# --- countdown: a long run to pause, steer and cancel live --------------------------------


def _tick(args: dict, ctx: ToolContext) -> dict:
    ctx.sleep(settings.HARBOR_TICK_SECONDS)
    return {"n": args["n"]}


class CountdownPlanner:
    def decide(self, view: PlannerView) -> CallTool | Finish:
        number = re.search(r"\d+", view.query)
        target = min(int(number.group()) if number else 20, 500)
        ticks = sum(1 for entry in view.history if entry.get("tool") == "tick")
        if ticks < target:
            return CallTool("tick", {"n": ticks + 1})
        parts = [f"Counted to {target}.", f"Goal: {view.goal}"]
        if view.context:
            parts.append(f"Context: {view.context}")
        if view.messages:
            parts.append(f"Messages: {view.messages}")
        return Finish(" ".join(parts))


register_agent(
    Agent(
        id="countdown",
        description="Counts from 1 to N (default 20), one tick a step.",
        planner=CountdownPlanner,
        tools={"tick": Tool("tick", _tick)},
    )
)

# --- tool_context: parks while holding a live handle ---------------------------------------


def _open_stream(args: dict, ctx: ToolContext) -> dict:
    near, far = socket.socketpair()
    if args.get("unregistered"):
        ctx.state["stream"] = near  # a live object in the serializable half: fails the pause
    else:
        ctx.attach("stream", near)
        ctx.attach("stream_peer", far)
    ctx.state["cursor"] = 0
    return {"opened": True}


def _read_stream(args: dict, ctx: ToolContext) -> dict:
    near, far = cast(socket.socket, ctx.handle("stream")), cast(socket.socket, ctx.handle("stream_peer"))
    far.sendall(b"resumed")
    data = near.recv(64).decode()
    ctx.state["cursor"] += len(data)
    return {"read": data, "cursor": ctx.state["cursor"]}


class ToolContextPlanner:
    def decide(self, view: PlannerView) -> Decision:
        tools = [entry.get("tool") for entry in view.history]
        if "open_stream" not in tools:
            return CallTool("open_stream", {"unregistered": "unregistered" in view.query})
        if not any(entry.get("pause") for entry in view.history):
            return RequestPause(
                cause=Cause.OPERATOR,
                reason=Reason.AWAIT_INPUT,
                payload={"Summary": "holding a live stream; resume to read from it"},
                summary="tool_context run parked with a live handle",
            )
        if "read_stream" not in tools:
            return CallTool("read_stream", {})
        read = next(e for e in view.history if e.get("tool") == "read_stream")["result"]
        return Finish(f"Read {read['read']!r} from the live stream after resuming.")


register_agent(
    Agent(
        id="tool_context",
        description="Parks while holding a live handle: resumable only in the same process.",
        planner=ToolContextPlanner,
        tools={"open_stream": Tool("open_stream", _open_stream), "read_stream": Tool("read_stream", _read_stream)},
    )
)

# --- long_task: tools that outlive a lease, to watch exactly-once survive a worker kill ----


def _work(args: dict, ctx: ToolContext) -> dict:
    ctx.sleep(args["seconds"])
    ctx.fence()  # the side effect below happens only while this worker holds the run
    return {"round": args["round"], "worked_seconds": args["seconds"], "idempotency_key": ctx.idempotency_key}


class LongTaskPlanner:
    """ "work 3 seconds, 4 times" → four rounds of three seconds; "gated" puts each round
    behind an approval."""

    def decide(self, view: PlannerView) -> CallTool | Finish:
        seconds = re.search(r"(\d+(?:\.\d+)?)\s*sec", view.query)
        times = re.search(r"(\d+)\s*times?", view.query)
        rounds = min(int(times.group(1)) if times else 1, 100)
        done = sum(1 for entry in view.history if entry.get("tool") == "work")
        if done < rounds:
            args = {"round": done + 1, "seconds": min(float(seconds.group(1)) if seconds else 3.0, 600.0)}
            return CallTool("work", {**args, "gated": "gated" in view.query})
        return Finish(f"Worked {rounds} round(s) of {view.history[-1]['result']['worked_seconds']} s each.")


register_agent(
    Agent(
        id="long_task",
        description='Works for a while each round ("work 3 seconds, 4 times"; "gated" asks before each round).',
        planner=LongTaskPlanner,
        tools={
            "work": Tool(
                "work",
                _work,
                approval=lambda args: bool(args.get("gated")),
                gate_reason="each round of work needs a go-ahead",
            )
        },
    )
)
