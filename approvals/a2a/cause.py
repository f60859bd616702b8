"""The `a2a` pause cause (PROTOCOL §4): a remote agent asks a question (await_input) or for
a sign-in (external_event). It is resumed with an answer (or by the OAuth leg), by the
pausing session or an admin; its remote task is cancelled with the pause, and with a run
cancelled while the call waits to run again. Registered by approvals.a2a.apps."""

from approvals.causes import PauseCause
from approvals.models import Cause, Decision, Reason
from runs.domain import events
from runs.models import Role

from .answers import a2a_input
from .cancel import cancel_parked_on_commit, cancel_pending_call_on_commit

A2A = PauseCause(
    name=Cause.A2A,
    reasons=frozenset({Reason.AWAIT_INPUT, Reason.EXTERNAL_EVENT}),
    decisions=frozenset({Decision.RESUME}),
    deciders=frozenset({Role.ADMIN}),
    companions=frozenset({events.A2A_INPUT_REQUIRED, events.A2A_AUTH_REQUIRED}),
    card_template="a2a/card.html",
    run_template="a2a/run_pause.html",
    answer_label="Answer",
    answer=a2a_input,
    on_cancel=cancel_parked_on_commit,
    on_run_cancel=cancel_pending_call_on_commit,
)
