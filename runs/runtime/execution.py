"""A step's tool body, run outside any transaction while the lease's heartbeat runs, and the
record of its outcome: under the run lock, only if this worker still holds the run and the
attempt is still the step's live one (the fence). The record gives the run back."""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from runs.domain import events, sql
from runs.domain.connection_loss import retry_once_if_lost, was_lost
from runs.domain.event_types import ToolCompleted, ToolFailed, tool_pause_companion
from runs.domain.transitions import run_fail, save_run
from runs.kernel.errors import ErrToolContextLost, ErrUnserializable
from runs.models import FailureCode, Run, RunStatus, ToolCall, ToolCallOutcome

from .lease import Landed, Lease, LeaseLost, give_back
from .ledger import outcome_of, settle_attempt
from .parking import park
from .tools import Interrupted, Tool, ToolContext, ToolFailure, ToolPause, TryLater

log = logging.getLogger("harbor.runtime")

DEFERRED_MAX_SECONDS = 30.0  # the longest a call that found its bound full is put off

Outcome = Callable[[Run], bool]  # applies an outcome to the run (lock held): whether it goes on


@dataclass
class Call:
    """A tool call about to run (or running): what the record phase re-checks."""

    tool: Tool
    args: dict
    step: int
    ctx: ToolContext
    attempt: ToolCall


def execute(lease: Lease, call: Call) -> Run | None:
    """Run the tool body outside any transaction, then record what happened: the run as the
    record left it when this worker goes on with it (no other run waits its turn), else None."""
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

        return _record(lease, call, ToolCallOutcome.PAUSED, park_signalled)
    except LeaseLost:
        settle_attempt(attempt, ToolCallOutcome.FENCED, "the worker lost its lease")
        raise
    except Interrupted:
        # Not recorded: the run's next boundary applies the hard cancel.
        settle_attempt(attempt, ToolCallOutcome.INTERRUPTED)
        return None
    except TryLater as later:
        return _record(lease, call, ToolCallOutcome.DEFERRED, partial(_deferred, attempt.attempt), str(later))
    except ErrToolContextLost as lost:
        message = lost.message
        return _record(
            lease, call, ToolCallOutcome.FAILED, lambda run: _failed(run, FailureCode.TOOL_CONTEXT_LOST, message)
        )
    except Exception as error:
        if was_lost(error):
            # The database's connection, not the tool (the body's own query found it gone):
            # the step is taken again, as after a crash.
            raise
        if isinstance(error, ToolFailure):  # the tool said why, in plain words
            code, message = error.code, f"{call.tool.name}: {error}"
        else:
            code, message = FailureCode.RUNTIME_ERROR, f"{call.tool.name}: {type(error).__name__}: {error}"

        def failed(run: Run) -> bool:
            events.emit(
                run=run,
                type=events.TOOL_FAILED,
                payload=ToolFailed(
                    Tool=call.tool.name, Step=call.step, Error=message, **call.tool.describe(call.args, ctx)
                ),
            )
            return _failed(run, code, message)

        return _record(lease, call, ToolCallOutcome.FAILED, failed, message)
    return _record(lease, call, ToolCallOutcome.COMPLETED, lambda run: _checkpoint(run, call, result))


def _record(lease: Lease, call: Call, outcome: str, apply: Outcome, error: str = "") -> Run | None:
    """Record an attempt's outcome, only if this worker still holds the run and the attempt
    is still the step's live one (the fence); then the run goes on with this worker while no
    other run waits its turn, else it is given back. Made again after a lost connection: a
    record that landed finds its attempt settled, and the body is never run twice for it."""

    def record(run: Run) -> Run | None:
        if run.status != RunStatus.RUNNING or run.checkpoint.get("step", 0) != call.step:
            settle_attempt(call.attempt, ToolCallOutcome.FENCED, f"the run moved on (it is {run.status})")
            return None
        if not settle_attempt(call.attempt, outcome, error):
            raise LeaseLost(lease.run_id)  # another worker took the step over and marked it lost
        if not apply(run):
            return None
        if sql.gives_way(run, timezone.now(), settings.HARBOR_TENANT_MAX_RUNNING):
            give_back(run)
            return None
        save_run(run)
        return run

    def landed(run: Run) -> Landed[Run | None] | None:
        return None if outcome_of(call.attempt) == ToolCallOutcome.RUNNING else Landed(None)

    try:
        return lease.transact(record, landed)
    except LeaseLost:
        settle_attempt(call.attempt, ToolCallOutcome.FENCED, "the worker lost its lease")
        raise


def _deferred(attempt: int, run: Run) -> bool:
    """The call could not start: the run gives its worker back, its call still pending, and
    is put off longer each time (half a second, doubling, at most DEFERRED_MAX_SECONDS), so a
    full bound costs the ledger a few rows, not one a second."""
    give_back(run, after=timedelta(seconds=min(DEFERRED_MAX_SECONDS, 0.5 * 2 ** (attempt - 1))))
    return False


def _failed(run: Run, code: str, message: str) -> bool:
    run_fail(run, code, message)
    return False


def _checkpoint(run: Run, call: Call, result: object) -> bool:
    try:
        saved_context = call.ctx.serialized()
    except ErrUnserializable as error:
        return _failed(run, FailureCode.RUNTIME_ERROR, error.message)
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
                cancelled = retry_once_if_lost(Run.objects.filter(pk=lease.run_id, hard_cancel=True).exists)
            except (OperationalError, InterfaceError) as error:  # the tool goes on; asked again next time
                log.warning("run %s: the check for a hard cancel failed (%s)", lease.run_id, error)
        return cancelled

    return interrupted
