"""Deliver the outbox's due messages once, from this process (after a redelivery, or where
neither Celery nor the embedded runtime drains)."""

from argparse import ArgumentParser

from django.core.management.base import BaseCommand

from outbox.delivery import deliver_due


class Command(BaseCommand):
    help = "Deliver the outbox's due messages once (retries included) and report how many were delivered."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--limit", type=int, default=1000, help="at most this many messages")

    def handle(self, *args: str, limit: int = 1000, **options: object) -> None:
        self.stdout.write(f"delivered {deliver_due(limit)} message(s)")
