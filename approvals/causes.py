"""Pause causes, registered: the one place a cause's behaviour is declared.

A cause is a `PauseCause`: its wire name, the Harbor reasons it parks with, the decisions
that end it, the roles that may take them, what an answer becomes, what resolving and
cancelling it do, its companion events, and the templates the inbox card and the run page
include for it. The core registers its own (an approval gate, an operator's pause) in
`approvals.apps`; OAuth sign-ins and remote A2A agents register theirs from their own
apps' `ready()`. Everything else reads the active registry: no module names a cause.

This module sits beside the models, below every layer (pyproject's import contracts), so
the decision rule (runs.identity) and the pages read it as the services do. `Cause` stays
the wire's closed set (the column's choices, the protocol's serializers); the system
check in approvals.apps holds the product registry to it."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from approvals.models import Decision, Pause
from runs.models import Run

GATE_DECISIONS = frozenset({Decision.APPROVE, Decision.REJECT})


class Renderable(Protocol):
    """A template object ({% include %} takes one as it takes a template's name)."""

    def render(self, *args: Any, **kwargs: Any) -> Any: ...


def as_is(pause: Pause, value: object) -> object:
    """A resume's input, stored as it came."""
    return value


def nothing(_: object) -> None:
    return None


@dataclass(frozen=True)
class PauseCause:
    name: str  # the wire's Cause: Pause.cause, pause.requested's Cause
    reasons: frozenset[str]  # the Harbor reasons it parks with
    decisions: frozenset[str]  # approve and reject for a gate; resume for the others
    deciders: frozenset[str]  # roles that decide it, beside the pausing (user, session) and delegates
    card_template: str | Renderable  # the inbox card (extends approvals/cards/_frame.html)
    run_template: str | Renderable  # its part of the run page's pause panel
    companions: frozenset[str] = frozenset()  # the event types that may accompany pause.requested
    answer_label: str = ""  # what the run page's resume control asks for ("": nothing)
    # A resume's input as stored (PayloadInvalid refuses it), called with the open pause.
    answer: Callable[[Pause, object], object] = as_is
    # In the decision's transaction, once the pause is decided and the run moved on (or ended).
    on_resolve: Callable[[Pause], None] = nothing
    # In the transaction that closes the pause without a decision: cancelled, timed out, or
    # refused upstream (a denied sign-in).
    on_cancel: Callable[[Pause], None] = nothing
    # A run cancelled while it is not parked: work of this cause it still owes (A2A: the
    # remote task of a call waiting to run again).
    on_run_cancel: Callable[[Run], None] = nothing

    @property
    def is_gate(self) -> bool:
        return bool(self.decisions & GATE_DECISIONS)


class UnknownCause(LookupError):
    """No registered cause of that name."""


class CauseRegistry:
    def __init__(self, *causes: PauseCause) -> None:
        self._causes: dict[str, PauseCause] = {}
        for cause in causes:
            self.register(cause)

    def register(self, cause: PauseCause) -> PauseCause:
        if cause.name in self._causes:
            raise ValueError(f"the pause cause {cause.name!r} is registered already")
        self._causes[cause.name] = cause
        return cause

    def get(self, name: str) -> PauseCause:
        try:
            return self._causes[name]
        except KeyError:
            raise UnknownCause(f"no pause cause {name!r} is registered") from None

    def find(self, name: str) -> PauseCause | None:
        return self._causes.get(name)

    def all(self) -> tuple[PauseCause, ...]:
        return tuple(self._causes.values())

    def names(self) -> frozenset[str]:
        return frozenset(self._causes)


# The product's: filled as the apps are ready (approvals, approvals.oauth, approvals.a2a).
registry = CauseRegistry()
_active = registry


def active() -> CauseRegistry:
    """The registry every lookup reads: the product's, or the one `isolated` swapped in."""
    return _active


def get(name: str) -> PauseCause:
    return _active.get(name)


@contextmanager
def isolated(*causes: PauseCause) -> Iterator[CauseRegistry]:
    """Read a registry of these causes alone for the block, then the previous one again."""
    global _active
    previous, _active = _active, CauseRegistry(*causes)
    try:
        yield _active
    finally:
        _active = previous
