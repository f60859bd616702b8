"""Steering scopes of PROTOCOL §3: session_user < owner_user < admin (each instruction's
least scope is in its spec, runs.domain.instructions)."""

from enum import IntEnum

from runs.identity.callers import Caller
from runs.identity.visibility import may_steer_as_owner, may_view_run
from runs.models import Run


class Scope(IntEnum):
    NONE = 0
    SESSION_USER = 1
    OWNER_USER = 2
    ADMIN = 3


SCOPE_NAMES = {"session_user": Scope.SESSION_USER, "owner_user": Scope.OWNER_USER, "admin": Scope.ADMIN}


def caller_scope(caller: Caller, run: Run) -> Scope:
    """The widest scope the caller holds over a run of its own tenant."""
    if caller.is_admin:
        return Scope.ADMIN
    if run.owner_id == caller.user.pk:
        # The owner holds owner_user from any session (and so session_user too).
        return Scope.OWNER_USER
    if may_steer_as_owner(caller, run):  # an operator steers as if owner
        return Scope.OWNER_USER
    return Scope.NONE


def can_view_run(caller: Caller, run: Run) -> bool:
    return may_view_run(caller, run)
