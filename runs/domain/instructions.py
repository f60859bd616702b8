"""The steering instructions, one frozen spec each (PROTOCOL §3): the wire name, the payload
schema, the least scope, when it applies and how. The wire, the OpenAPI document and the
pages read an instruction's payload from its spec, so a payload's shape is written once.

The product's registry holds the nine and refuses any other name: a new verb is a protocol
change, not a plug-in. Their apply functions need the runtime, so the runtime registers them
(runs.runtime.instructions, at app start); this module holds only the registry."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from runs.domain.instruction_payloads import InstructionPayload
from runs.identity.callers import Caller
from runs.identity.scopes import Scope
from runs.kernel.errors import UnknownMethod
from runs.models import Instruction, Run

if TYPE_CHECKING:
    from approvals.models import Pause


class Timing(StrEnum):
    AT_ONCE = "at_once"  # inside the request
    AT_BOUNDARY = "at_boundary"  # at the run's next step boundary


@dataclass(frozen=True)
class Submission:
    """An instruction about to apply inside its request, the run's lock held."""

    caller: Caller
    run: Run
    payload: dict[str, Any]
    pause_id: str | None  # a decision from a page names its pause by id
    target: "Pause | None"  # a decision's pause, locked


@dataclass(frozen=True)
class Applied:
    """An instruction applied inside its request: its audit row is written settled."""

    audited: dict[str, Any] | None = None  # what the audit keeps, when not the payload (a sealed credential)
    then: Callable[[], None] | None = None  # what follows its control.applied narration (a cancel's end)


# Inside the request: Applied, or None for "the rest waits for the boundary".
ApplyNow = Callable[[Submission], Applied | None]
# At a step boundary (run lock held): the instruction's name when the run must stop advancing.
ApplyAtBoundary = Callable[[Run, dict[str, Any]], str | None]


@dataclass(frozen=True)
class InstructionSpec:
    name: str
    payload: type[InstructionPayload]
    scope: Scope  # the least scope a caller needs (a pause's decider may decide below it)
    timing: Timing
    summary: str  # one line for the OpenAPI document
    # AT_ONCE: required. AT_BOUNDARY: optional, for what applies at once in some states
    # (a cancel ends a parked run at once).
    apply_now: ApplyNow | None = None
    apply_at_boundary: ApplyAtBoundary | None = None
    decides_pause: bool = False  # approve, reject, resume: the decision rule has the last word
    lock_first: Callable[[Run], object] | None = None  # rows locked before anything is written

    def __post_init__(self) -> None:
        if self.timing is Timing.AT_ONCE and self.apply_now is None:
            raise ValueError(f"{self.name} applies at once: give it apply_now")
        if self.timing is Timing.AT_BOUNDARY and self.apply_at_boundary is None:
            raise ValueError(f"{self.name} applies at a step boundary: give it apply_at_boundary")


class Registry:
    """Specs by name. `closed`: the only names it takes (the product's: the nine)."""

    def __init__(self, closed: frozenset[str] | None = None) -> None:
        self.closed = closed
        self._specs: dict[str, InstructionSpec] = {}

    def register(self, spec: InstructionSpec) -> InstructionSpec:
        if self.closed is not None and spec.name not in self.closed:
            raise ValueError(f"{spec.name!r} is not a steering instruction of the protocol; the nine are a closed set")
        self._specs[spec.name] = spec
        return spec

    def spec_for(self, name: str) -> InstructionSpec:
        spec = self._specs.get(name) if isinstance(name, str) else None
        if spec is None:
            raise UnknownMethod(f"unknown steering method {str(name)[:64]!r}; the nine are {', '.join(self.names())}")
        return spec

    def names(self) -> list[str]:
        return list(self._specs)

    def __iter__(self) -> Iterator[InstructionSpec]:
        return iter(list(self._specs.values()))

    def __len__(self) -> int:
        return len(self._specs)


PRODUCT = Registry(closed=frozenset(Instruction.values))


def register(spec: InstructionSpec) -> InstructionSpec:
    """Add `spec` to the product's registry (one of the nine, at app start)."""
    return PRODUCT.register(spec)


def spec_for(name: str) -> InstructionSpec:
    """The product's spec of `name`; UnknownMethod (404 unknown_method) for any other."""
    return PRODUCT.spec_for(name)


def specs() -> list[InstructionSpec]:
    """The product's specs, in registration order."""
    return list(PRODUCT)


def isolated() -> Registry:
    """A registry of its own, open to any name (tests): nothing in it reaches the product."""
    return Registry()
