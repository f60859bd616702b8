"""The `delegate` tool: hand a request to a remote A2A agent and go on with its artifact.

The remote task's address (agent, task id, context id) lives in the tool context's
serializable half (PROTOCOL §8), so the call can go on on any worker, after a restart. The
call is long and must never be sent twice: the context id is derived from the call's
idempotency key and every message id from it too, so before sending, an attempt looks for
what an earlier attempt may already have sent (the task in that context; the answer in the
task's history) and follows it instead."""

import os
import time
from collections.abc import Callable
from datetime import timedelta

from approvals.models import Cause, Reason
from runs.domain import events
from runs.domain.event_types import ToolFacts
from runs.models import Instruction, Run, SteeringInstruction, SteeringState
from runs.runtime.tools import Interrupted, ToolContext, ToolPause, TryLater

from . import bridge, limits, slots, wire
from .answers import unseal_answer
from .auth_leg import known_oauth_source, sign_in, signed_in_token
from .cancel import cancel_remote_soon
from .capped import ResponseTooLarge
from .directory import RemoteAgent, remote_agent_for
from .failures import RemoteAgentFailed
from .retry import with_retries
from .wire import RemoteTask, stable_id

STATE_KEY = "a2a"
SUMMARY_BYTES = 300


class RemoteTaskEnded(RemoteAgentFailed):
    """The remote task failed, was rejected or was cancelled: its message says why."""


def delegate(args: dict, ctx: ToolContext) -> dict:
    run = Run.objects.select_related("tenant", "owner").get(pk=ctx.run_id)
    agent = remote_agent_for(run.tenant_id, args["agent"])
    state = _call_state(ctx, agent)
    try:
        with slots.held(slots.scopes(run.tenant_id, agent.card_url), sleep=ctx.sleep) as holding:
            task = _run(run, agent, state, ctx, lambda: _deliver(run, agent, state, args, ctx, holding))
    except slots.NoFreeSlot as full:  # never waits holding a worker: the step is taken again later
        raise TryLater(f"remote agent {agent.name}: {full}") from None
    state.update(task_id=task.task_id, context_id=task.context_id, waiting="", source="")
    return _outcome(run, agent, state, task)


def facts(args: dict, ctx: ToolContext) -> ToolFacts:
    """What every event about this call names: the remote agent, task and context."""
    state = ctx.state.get(STATE_KEY) or {}
    if state.get("call") != ctx.idempotency_key:
        return ToolFacts(Agent=args.get("agent", ""), RemoteTaskID="", ContextID=stable_id(ctx.idempotency_key))
    return ToolFacts(Agent=state["agent"], RemoteTaskID=state.get("task_id", ""), ContextID=state["context_id"])


def _call_state(ctx: ToolContext, agent: RemoteAgent) -> dict:
    state = ctx.state.get(STATE_KEY)
    if not state or state.get("call") != ctx.idempotency_key:  # a new call (not a resume of this one)
        state = {
            "call": ctx.idempotency_key,
            "agent": agent.name,
            "card_url": agent.card_url,
            "context_id": stable_id(ctx.idempotency_key),
            "task_id": "",
            "waiting": "",
        }
        ctx.state[STATE_KEY] = state
    return state


def _run(
    run: Run, agent: RemoteAgent, state: dict, ctx: ToolContext, operation: Callable[[], RemoteTask]
) -> RemoteTask:
    """Retry transport failures with backoff; a hard cancel of the step cancels the remote task."""
    try:
        return with_retries(agent.name, operation, sleep=ctx.sleep)
    except (bridge.Interrupted, Interrupted):
        cancel_remote_soon(run.tenant_id, state)
        raise Interrupted() from None
    except (wire.RemoteStalled, wire.RemoteTooSlow, ResponseTooLarge):
        cancel_remote_soon(run.tenant_id, state)  # the call gives up on it: so does its agent
        raise


def _deliver(
    run: Run, agent: RemoteAgent, state: dict, args: dict, ctx: ToolContext, holding: slots.Held
) -> RemoteTask:
    """One idempotent delivery: send what this call has not sent yet, else follow the task."""
    stop = _stop_probe(ctx, holding)
    wait = lambda coroutine: bridge.call(coroutine, interrupted=stop)  # noqa: E731
    if not state["task_id"]:
        earlier = wait(wire.find_in_context(agent, state["context_id"]))
        if earlier is not None:  # an attempt that died after sending: never send twice
            state["task_id"] = earlier.task_id
            return (
                earlier
                if earlier.settled
                else wait(wire.follow(agent, earlier.task_id, context_id=state["context_id"]))
            )
        ctx.fence()  # only the worker holding the run sends
        return wait(
            wire.send(
                agent,
                text=args["request"],
                context_id=state["context_id"],
                message_id=stable_id(ctx.idempotency_key, "request"),
            )
        )
    resolution = ctx.resumed or {}
    answer = _answer(run, state, resolution)
    if answer is not None:
        message_id = stable_id(ctx.idempotency_key, "answer", str(resolution.get("pause")))
        current = wait(wire.get(agent, state["task_id"], context_id=state["context_id"]))
        if message_id in current.message_ids or current.state in wire.TERMINAL:
            # The answer already went (follow, do not repeat), or the task ended meanwhile.
            return (
                current
                if current.settled
                else wait(wire.follow(agent, current.task_id, context_id=state["context_id"]))
            )
        ctx.fence()
        return wait(
            wire.send(
                agent,
                text=answer,
                context_id=state["context_id"],
                task_id=state["task_id"],
                message_id=message_id,
            )
        )
    return wait(wire.follow(agent, state["task_id"], context_id=state["context_id"]))


def _answer(run: Run, state: dict, resolution: dict) -> str | None:
    """What goes back to the remote task after a resume: the person's answer, or, for a
    sign-in through the OAuth leg, her access token (read now, never stored with the pause).
    None when there is nothing to send (no resume; a sign-in whose credential is gone: the
    task is followed, and asks again)."""
    if not state["waiting"] or resolution.get("decision") != "resume":
        return None
    if resolution.get("input") is None and state.get("source"):
        return signed_in_token(run, state["source"], str(resolution.get("pause")))
    return unseal_answer(resolution.get("input"))


def _stop_probe(ctx: ToolContext, holding: slots.Held) -> Callable[[], bool]:
    """Stop waiting at a hard cancel, and at a plain one too: a remote call may take long,
    and a cancelled run must not wait for it (the next boundary applies the cancel). Asked
    often while the call waits, it also keeps the call's slots."""
    checked_at, cancel_pending = 0.0, False

    def stop() -> bool:
        nonlocal checked_at, cancel_pending
        holding.keep()
        if ctx.interrupted():
            return True
        if time.monotonic() - checked_at >= 0.25:
            checked_at = time.monotonic()
            cancel_pending = SteeringInstruction.objects.filter(
                run_id=ctx.run_id, state=SteeringState.PENDING, instruction=Instruction.CANCEL
            ).exists()
        return cancel_pending

    return stop


def _outcome(run: Run, agent: RemoteAgent, state: dict, task: RemoteTask) -> dict:
    named = {"Agent": agent.name, "RemoteTaskID": task.task_id, "ContextID": task.context_id}
    if task.state == "completed":
        return {**named, "State": task.state, "Artifact": task.artifact}
    if task.state == "input-required":
        state.update(waiting="input", question=task.message)
        raise ToolPause(
            cause=Cause.A2A,
            reason=Reason.AWAIT_INPUT,
            payload={**named, "Question": task.message},
            companion=events.A2A_INPUT_REQUIRED,
            summary=f"{agent.name} asks: {_short(task.message)}",
            deadline=_deadline(),
        )
    if task.state == "auth-required":
        source = known_oauth_source(run, task)
        state.update(waiting="auth", question=task.message, source=source.name if source else "")
        payload: dict = {**named, "Question": task.message}
        on_park = None
        if source is not None:  # resolved by the OAuth leg: the person signs in at the provider
            fields, pending = sign_in(run, source)
            payload.update(fields)
            on_park = pending.bind
        raise ToolPause(
            cause=Cause.A2A,
            reason=Reason.EXTERNAL_EVENT,
            payload=payload,
            companion=events.A2A_AUTH_REQUIRED,
            summary=f"{agent.name} needs sign-in: {_short(task.message)}",
            deadline=_deadline(),
            on_park=on_park,
        )
    raise RemoteTaskEnded(f"remote agent {agent.name} task {task.task_id} {task.state}: {task.message or 'no message'}")


def _short(text: str) -> str:
    """A notification's line: the first few hundred bytes of what the agent said."""
    return limits.bounded_text(text, SUMMARY_BYTES)


def _deadline() -> timedelta | None:
    seconds = float(os.environ.get("HARBOR_A2A_PAUSE_SECONDS", "0"))
    return timedelta(seconds=seconds) if seconds > 0 else None
