"""A worker's lease on a run: claimed with a conditional UPDATE, kept alive by a heartbeat
while a planner or tool works, and checked (fenced) before anything is recorded or any side
effect starts. The worker id is unique per claim, so it doubles as the fencing token: a
worker whose lease expired and was taken can never match it again."""

import contextlib
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from runs.models import Run, RunStatus

log = logging.getLogger("harbor.runtime")

READY = (RunStatus.PENDING, RunStatus.RUNNING)


class LeaseLost(Exception):
    """This worker no longer holds the run: another worker (or nobody) does."""


def lease_length() -> timedelta:
    return timedelta(seconds=settings.HARBOR_LEASE_SECONDS)


def claimable() -> QuerySet[Run]:
    """Ready runs no live worker holds (free, or their holder died and the lease expired)."""
    return Run.objects.filter(status__in=READY).filter(Q(lease_owner="") | Q(lease_expires_at__lt=timezone.now()))


class Lease:
    def __init__(self, run_id: str, worker: str) -> None:
        self.run_id, self.worker = run_id, worker
        self.lost = threading.Event()

    def claim(self) -> bool:
        """Take the run if it is free or its lease expired. The row count of this conditional
        UPDATE decides between competing workers."""
        now = timezone.now()
        taken = (
            claimable().filter(pk=self.run_id).update(lease_owner=self.worker, lease_expires_at=now + lease_length())
        )
        return taken == 1

    def renew(self) -> bool:
        renewed = Run.objects.filter(
            pk=self.run_id, lease_owner=self.worker, lease_expires_at__gte=timezone.now()
        ).update(lease_expires_at=timezone.now() + lease_length())
        if not renewed:
            self.lost.set()
        return bool(renewed)

    def fence(self) -> None:
        """Raise unless this worker still holds an unexpired lease (a live database check)."""
        if (
            self.lost.is_set()
            or not Run.objects.filter(
                pk=self.run_id, lease_owner=self.worker, lease_expires_at__gte=timezone.now()
            ).exists()
        ):
            self.lost.set()
            raise LeaseLost(self.run_id)

    def locked_run(self) -> Run:
        """The run under its row lock, if this worker still holds an unexpired lease on it (the
        fence), which is renewed while the lock is held. `no_key`: the run's key never changes,
        so rows pointing at it (events, pauses) may still be inserted meanwhile."""
        run = Run.objects.select_for_update(no_key=True, of=("self",)).select_related("owner").get(pk=self.run_id)
        if run.is_terminal:
            return run  # ended meanwhile (a cancel, a rejection): the caller stops here
        now = timezone.now()
        if run.lease_owner != self.worker or run.lease_expires_at is None or run.lease_expires_at < now:
            self.lost.set()
            raise LeaseLost(self.run_id)
        run.lease_expires_at = now + lease_length()
        Run.objects.filter(pk=run.pk).update(lease_expires_at=run.lease_expires_at)
        return run

    def release(self) -> None:
        Run.objects.filter(pk=self.run_id, lease_owner=self.worker).update(lease_owner="", lease_expires_at=None)

    @contextlib.contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Renew the lease every third of its length while the body runs, on a thread of its
        own, so a slow planner or tool (an LLM, a deploy, a remote agent) keeps its run."""
        stop = threading.Event()
        interval = settings.HARBOR_LEASE_SECONDS / 3

        def beat() -> None:
            try:
                while not stop.wait(interval):
                    if not self.renew():
                        log.warning("worker %s lost its lease on run %s", self.worker, self.run_id)
                        return
            except Exception:  # the database is unreachable: the fence decides later
                log.exception("lease heartbeat for run %s failed", self.run_id)
            finally:
                connection.close()

        thread = threading.Thread(target=beat, name=f"harbor-lease-{self.run_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
