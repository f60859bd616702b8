"""Advance ready runs from this process: `--until-idle` drains the queue once and exits;
without it the command keeps serving (a worker without Celery)."""

import time
from argparse import ArgumentParser

from django.conf import settings
from django.core.management.base import BaseCommand

from runs.runtime.dispatch import drain, sweep


class Command(BaseCommand):
    help = "Advance ready runs (highest priority first) and sweep overdue pauses."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--until-idle", action="store_true", help="exit once no run is ready")

    def handle(self, *args: str, until_idle: bool = False, **options: object) -> None:
        while True:
            advanced = drain()
            if until_idle:
                self.stdout.write(f"advanced {advanced} run(s)")
                return
            sweep()
            if not advanced:
                time.sleep(settings.HARBOR_SWEEP_SECONDS)
