"""A /v1/ request whose database connection was lost mid-way (a server restart, a failover, a
killed backend) is answered again, once, on a new connection: nothing it did was committed,
so the second answer is the only one. When the loss came during its COMMIT, the server may
have committed before the connection went. A request that applies once however often it is
answered is answered again: a read; a start, which chose its run's id before its first
answer and looks for that run before making one; a control with an `event_id` (PROTOCOL
§2). Any other asks PostgreSQL what became of its transaction (runs.domain.connection_loss):
aborted, it is answered again; committed, it is answered as applied, and what the commit
would have set off (a worker woken, live pushes) runs then. A transaction still in progress
(a server that has not noticed the loss yet) or whose id never came back is answered
`runtime_error`, saying it may have taken effect."""

from django.db import connection

from runs.domain.connection_loss import commit_in_doubt, forget_doubt, was_lost, what_landed


class AnswerAgain(Exception):
    """Raised out of a view's error handling to have the request answered again."""


class Outcome:
    ANSWER_AGAIN = "answer again"  # nothing of it was committed, or answering it twice applies it once
    LANDED = "landed"  # its COMMIT was applied after all: answer it as applied


def after_loss(error: BaseException, *, replayable: bool) -> str | None:
    """What to do with a request that `error` interrupted, if it lost its connection: an
    Outcome, or None to answer the error. `replayable`: answering the request twice applies
    it once."""
    if not was_lost(error) or connection.in_atomic_block:
        return None
    if replayable:
        return Outcome.ANSWER_AGAIN
    landed = what_landed()
    if landed == "aborted":
        return Outcome.ANSWER_AGAIN
    return Outcome.LANDED if landed == "committed" else None


def reconnect() -> None:
    """Let the next query take a new connection (the pool discards the lost one)."""
    connection.close()
    forget_doubt()


def lost_message() -> str:
    if commit_in_doubt():
        return (
            "the database connection was lost while this request committed: it may have taken effect. "
            "A control with an event_id applies once however often it is sent"
        )
    return "the database connection was lost; try again"
