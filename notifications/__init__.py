"""Notifications: what happened to a pause, told on the channels a deployment turns on.

    notifications.register(channel)                  # at app start: a Channel (name, deliver)
    notifications.notify(Notice.about(kind, pause, summary))   # in the transaction that causes it

Each channel gets one outbox message per notice, delivered after the commit with the outbox's
retries: a channel raises RetryableFailure (tried again) or PermanentFailure (given up)."""

from notifications.channels import (
    Channel,
    Channels,
    PermanentFailure,
    RetryableFailure,
    isolated,
    register,
    registered,
)
from notifications.delivery import notify
from notifications.notices import Notice, NoticeKind

__all__ = [
    "Channel",
    "Channels",
    "Notice",
    "NoticeKind",
    "PermanentFailure",
    "RetryableFailure",
    "isolated",
    "notify",
    "register",
    "registered",
]
