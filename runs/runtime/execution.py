"""A step's tool body, run outside any transaction while the lease's heartbeat runs, and
the record of its outcome: under the run lock, only if this worker still holds the run and
the attempt is still the step's live one (the fence). The record's transaction goes on
with whatever comes next (`then`), so the next step needs no transaction of its own."""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.db import InterfaceError, OperationalError

from runs.domain import events
from runs.domain.connection_loss import once_more_if_lost, was_lost
from runs.domain.errors import ErrToolContextLost, ErrUnserializable
from runs.domain.event_types import ToolCompleted, ToolFailed, tool_pause_companion
from runs.domain.rows import RUNS
from runs.domain.transitions import run_fail
from runs.models import FailureCode, Run, RunStatus, ToolCall, ToolCallOutcome

from .lease import Lease, LeaseLost
from .ledger import settle_attempt, settle_attempt_at_end
from .parking import park
from .tools import Interrupted, Tool, ToolContext, ToolPause

log = logging.getLogger("harbor.runtime")

Next = TypeVar("Next")
Then = Callable[[Lease, Run], Next]  # what comes next, in the same transaction


@dataclass
class Call:
    """A tool call about to run (or running): what the record phase re-checks."""

    tool: Tool
    args: dict
    step: int
    ctx: ToolContext
    attempt: ToolCall


def execute(lease: Lease, call: Call, then: Then[Next]) -> Next | None:
    """Run the tool body outside any transaction, then record what happened and go on
    with `then` when the run goes on (None: it parked, ended or moved on)."""
    ctx, attempt = call.ctx, call.attempt
    ctx.idempotency_key = attempt.idempotency_key
    ctx.fence = lease.fence
    ctx.interrupted = _interrupt_probe(lease)
    try:
        with lease.heartbeat():
            result = call.tool.run(call.args, ctx)
    except ToolPause as signal:
        pause = signal

        def park_signalled(run: Run) -> bool:
            return park(
                run,
                ctx,
                cause=pause.cause,
                reason=pause.reason,
                payload=pause.payload,
                summary=pause.summary,
                deadline=pause.deadline,
                tool=call.tool.name,
                companion=(pause.companion, tool_pause_companion(pause.payload, events.SEALED)),
                on_park=pause.on_park,
            )

        return _record(lease, call, ToolCallOutcome.PAUSED, park_signalled, then)
    except LeaseLost:
        settle_attempt(attempt, ToolCallOutcome.FENCED, "the worker lost its lease")
        raise
    except Interrupted:
        settle_attempt(attempt, ToolCallOutcome.INTERRUPTED)
        with events.atomic():  # the boundary applies the hard cancel; the step is not recorded
            return then(lease, lease.locked_run())
    except ErrToolContextLost as lost:
        message = lost.message
        return _record(
            lease,
            call,
            ToolCallOutcome.FAILED,
            lambda run: run_fail(run, FailureCode.TOOL_CONTEXT_LOST, message),
            then,
            message,
        )
    except Exception as error:
        if was_lost(error):
            # The database's connection, not the tool (the runtime's own check found it gone
            # twice, or the body's own query did): the step is taken again, as after a crash.
            raise
        message = f"{call.tool.name}: {type(error).__name__}: {error}"

        def failed(run: Run) -> None:
            events.emit(
                run=run,
                type=events.TOOL_FAILED,
                payload=ToolFailed(
                    Tool=call.tool.name, Step=call.step, Error=message, **call.tool.describe(call.args, ctx)
                ),
            )
            run_fail(run, FailureCode.RUNTIME_ERROR, message)

        return _record(lease, call, ToolCallOutcome.FAILED, failed, then, message)
    return _record(lease, call, ToolCallOutcome.COMPLETED, lambda run: _checkpoint(run, call, result), then)


def _record(
    lease: Lease, call: Call, outcome: str, apply: Callable[[Run], object], then: Then[Next], error: str = ""
) -> Next | None:
    """Record an attempt's outcome, only if this worker still holds the run and the attempt
    is still the step's live one (the fence), then go on (Lease.transact: on the run as
    this worker left it, or under its lock). Kept through a lost connection (the record made
    again, or taken as made): the body is not run twice for it."""

    def record(run: Run) -> Next | None:
        if run.status != RunStatus.RUNNING or run.checkpoint.get("step", 0) != call.step:
            settle_attempt(call.attempt, ToolCallOutcome.FENCED, f"the run moved on (it is {run.status})")
            return None
        # Unless it is no longer the step's live attempt (another worker took the step over):
        # then nothing of this transaction lands.
        settle_attempt_at_end(call.attempt, outcome, LeaseLost(lease.run_id), error)
        return then(lease, run) if apply(run) else None

    try:
        return lease.transact(record)
    except LeaseLost:
        settle_attempt(call.attempt, ToolCallOutcome.FENCED, "the worker lost its lease")
        raise


def _checkpoint(run: Run, call: Call, result: object) -> bool:
    try:
        saved_context = call.ctx.serialized()
    except ErrUnserializable as error:
        run_fail(run, FailureCode.RUNTIME_ERROR, error.message)
        return False
    checkpoint = dict(run.checkpoint)
    checkpoint["history"] = [
        *checkpoint.get("history", []),
        {"tool": call.tool.name, "args": call.args, "result": result},
    ]
    checkpoint["step"] = call.step + 1
    checkpoint["tool_context"] = saved_context
    checkpoint.pop("pending_call", None)
    checkpoint.pop("resolution", None)
    run.checkpoint = checkpoint
    # What follows in this transaction (the end, a park, the next call) mostly writes the
    # run anyway, and takes the checkpoint along: one UPDATE, not two.
    events.at_end(RUNS, run)
    events.emit(
        run=run,
        type=events.TOOL_COMPLETED,
        payload=ToolCompleted(
            Tool=call.tool.name,
            Step=call.step,
            Result=result,
            Attempt=call.attempt.attempt,
            **call.tool.describe(call.args, call.ctx),
        ),
    )
    return True


def _interrupt_probe(lease: Lease) -> Callable[[], bool]:
    """A cheap, throttled check for a hard cancel of the step in flight, or a lost lease."""
    checked_at, cancelled = 0.0, False

    def interrupted() -> bool:
        nonlocal checked_at, cancelled
        if lease.lost.is_set():
            raise LeaseLost(lease.run_id)
        now = time.monotonic()
        if now - checked_at >= 0.1:
            checked_at = now
            try:
                cancelled = once_more_if_lost(Run.objects.filter(pk=lease.run_id, hard_cancel=True).exists)
            except (OperationalError, InterfaceError) as error:  # the tool goes on; asked again next time
                log.warning("run %s: the check for a hard cancel failed (%s)", lease.run_id, error)
        return cancelled

    return interrupted
