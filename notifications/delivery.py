"""A notice becomes one outbox message per channel, written in the transaction that causes it:
it is delivered after that commits (never for a change rolled back), with the outbox's
retries, and under one key per channel and notice (a repeat is not a second notice)."""

import outbox
from notifications.channels import PermanentFailure, active, registered
from notifications.notices import Notice

KIND = "notification"


def notify(notice: Notice) -> None:
    """Owe `notice` to every channel turned on; called inside the transaction that causes it."""
    for channel in registered():
        outbox.enqueue(KIND, f"{channel.name}:{notice.key}", {"channel": channel.name, "notice": notice.as_payload()})


def notice_deliver(delivery: outbox.Delivery) -> None:
    """The outbox handler of KIND: hand the notice to its channel."""
    name = delivery.payload["channel"]
    channel = active().named(name)
    if channel is None:  # turned off since: nobody is left to deliver it
        raise outbox.PermanentFailure(f"no notification channel named {name!r} is registered")
    try:
        channel.deliver(Notice.from_payload(delivery.payload["notice"]))
    except PermanentFailure as failure:
        raise outbox.PermanentFailure(f"{name}: {failure}") from failure
