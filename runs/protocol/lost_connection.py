"""A /v1/ request whose database connection was lost mid-way (a server restart, a failover, a
killed backend). Lost before its COMMIT, nothing of it landed; lost during it, it may have. The
request reads back what it wrote, on a new connection (`ProtocolView.landed`: a start's run, a
control's steering instruction, by the ids chosen before the first try): found, it is answered
as applied; not found, it is answered again, once. A second loss answers `runtime_error` with
Retry-After: a control sent again with its `event_id` applies once."""

from django.db import connection

from runs.domain.connection_loss import was_lost


class AnswerAgain(Exception):
    """Raised out of a view's error handling to have the request answered again."""


def lost(error: BaseException) -> bool:
    """Whether `error` is this request's connection lost outside any transaction of its own."""
    return was_lost(error) and not connection.in_atomic_block


def reconnect() -> None:
    """Let the next query take a new connection (the pool discards the lost one)."""
    connection.close()


MESSAGE = (
    "the database connection was lost twice while answering; it may have taken effect: "
    "send it again (a control with the same event_id applies once)"
)
