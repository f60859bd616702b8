"""Every pause transition, by concern: park (mint a pause and its token), decide, and
close without a decision (cancel, expire). What differs by cause is its registration's
(approvals.causes), never a branch here.

Lock order is always run, then pause. Callers that decide hold the run's row lock."""

from .close import pause_cancel_open, pause_close, pause_sweep_overdue, run_cancel_unparked
from .decide import pause_decide, pause_decision_refused, pause_targeted
from .park import parked_by_operator, pause_park

__all__ = [
    "parked_by_operator",
    "pause_cancel_open",
    "pause_close",
    "pause_decide",
    "pause_decision_refused",
    "pause_park",
    "pause_sweep_overdue",
    "pause_targeted",
    "run_cancel_unparked",
]
