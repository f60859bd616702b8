"""Tools, their approval policies, and the tool context split of PROTOCOL §8."""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from runs.domain import handles
from runs.domain.arguments import schema_check
from runs.domain.event_types import ToolFacts
from runs.kernel.errors import ErrToolContextLost, ErrUnserializable

ApprovalPolicy = Literal["never", "always"] | Callable[[dict], bool]  # or a predicate over the args


@dataclass(frozen=True)
class Tool:
    name: str
    run: Callable[[dict, "ToolContext"], Any]
    approval: ApprovalPolicy = "never"
    editable_args: bool = False
    deadline: timedelta | None = None
    gate_reason: str = ""
    # What the call's events name beside Tool and Step (a remote agent's task, say):
    # merged into tool.invoked, tool.completed and tool.failed.
    facts: Callable[[dict, "ToolContext"], ToolFacts] | None = None
    # Its arguments as a JSON Schema (draft 2020-12): a planner's call and an approver's edit
    # that do not match it are refused; the pages draw their edit fields from it.
    arguments: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.arguments is not None:
            schema_check(self.arguments)  # a broken schema fails where it is declared

    def describe(self, args: dict, ctx: "ToolContext") -> ToolFacts:
        return self.facts(args, ctx) if self.facts else ToolFacts()

    def needs_approval(self, args: dict) -> bool:
        if self.approval == "never":
            return False
        if self.approval == "always":
            return True
        return bool(self.approval(args))


class ToolPause(Exception):
    """Raised by a tool to signal that it cannot go on without an intervention (an OAuth
    sign-in, a remote agent's question). The runtime parks the run; on resume the same
    call runs again with `ctx.resumed` set. `on_park`, if given, is called with the new
    pause inside the transaction that mints it (to bind state of the tool's own to it,
    such as an OAuth sign-in flow)."""

    def __init__(
        self,
        *,
        cause: str,
        reason: str,
        payload: dict,
        companion: str,
        summary: str = "",
        deadline: timedelta | None = None,
        on_park: Callable[[Any], object] | None = None,
    ) -> None:
        super().__init__(summary or cause)
        self.cause, self.reason, self.payload = cause, reason, payload
        self.companion, self.summary, self.deadline = companion, summary, deadline
        self.on_park = on_park


class Interrupted(Exception):
    """The step in flight was interrupted by a hard cancel."""


class ToolFailure(Exception):
    """Raised by a tool whose call failed for a reason it names in plain words (a remote
    agent too slow, its answer too large): the run fails with `code` and the message alone."""

    code = "runtime_error"


class TryLater(Exception):
    """Raised by a tool that cannot start its call now (a bound on calls in flight is full)
    before any side effect: the attempt is recorded as deferred and the run gives its worker
    back, queued behind the runs waiting; its next step runs the same call again."""


@dataclass
class ToolContext:
    """Per-run tool state. `state` must stay serializable (it is checkpointed); live
    objects go through `attach`, which registers them under a handle key."""

    run_id: str
    state: dict = field(default_factory=dict)
    handle_keys: dict[str, str] = field(default_factory=dict)
    resumed: dict | None = None
    interrupted: Callable[[], bool] = lambda: False
    # Stable across every attempt of one step: give it to outside services (an
    # Idempotency-Key header, a client token) so a retried step cannot repeat a side effect.
    idempotency_key: str = ""
    # Call right before an outside side effect: raises if this worker lost the run.
    fence: Callable[[], None] = lambda: None

    def attach(self, name: str, handle: object) -> None:
        self.handle_keys[name] = handles.register(self.run_id, name, handle)

    def handle(self, name: str) -> object:
        key = self.handle_keys.get(name)
        handle = handles.lookup(key) if key else None
        if handle is None:
            raise ErrToolContextLost(name)
        return handle

    def sleep(self, seconds: float) -> None:
        """Sleep in slices, so a hard cancel interrupts the step in flight."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.interrupted():
                raise Interrupted()
            time.sleep(min(left, 0.1))
        if self.interrupted():
            raise Interrupted()

    def serialized(self) -> dict:
        """The checkpointable half: fails loudly, naming the field, on a live object."""
        for name, value in self.state.items():
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                raise ErrUnserializable(name) from None
        return {"state": dict(self.state), "handles": dict(self.handle_keys)}

    @classmethod
    def restore(cls, run_id: str, saved: dict | None) -> "ToolContext":
        """Rebuild from a checkpoint, re-attaching every live handle by key."""
        saved = saved or {}
        ctx = cls(run_id=run_id, state=dict(saved.get("state", {})), handle_keys=dict(saved.get("handles", {})))
        for name in ctx.handle_keys:
            ctx.handle(name)  # raises ErrToolContextLost naming the first missing handle
        return ctx
