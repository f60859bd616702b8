"""An approval hands the run to a worker of this process in its own commit (lease taken,
the gated call's attempt opened), under the dispatcher's rules; a hand-off that waited past
its lease is dropped, and the step still runs once."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.domain.services import run_start, steering_submit
from runs.models import Event, Run, RunStatus, ToolCall
from runs.runtime import handoff
from runs.runtime.dispatch import drain
from runs.runtime.lease import Lease

pytestmark = pytest.mark.django_db(transaction=True)


def _approved(people) -> Run:
    alice = people.caller("alice")
    run, _ = run_start(caller=alice, query="launch", agent_id="probe")
    drain()
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED
    steering_submit(caller=alice, run_id=run.pk, method="approve", payload={})
    return Run.objects.get(pk=run.pk)


def test_an_approval_hands_the_run_on_with_the_attempt_opened(people_tx, probe):
    run = _approved(people_tx)
    assert run.status == RunStatus.RUNNING and run.lease_owner  # claimed by the approval's commit
    attempt = ToolCall.objects.get(run=run)
    assert (attempt.attempt, attempt.outcome, attempt.worker) == (1, "running", run.lease_owner)
    assert Event.objects.filter(run=run, type="tool.invoked").count() == 1
    assert probe.calls == []  # the body runs on the worker, after the commit
    assert drain() == 1
    run.refresh_from_db()
    assert (run.status, run.lease_owner) == (RunStatus.COMPLETE, "")
    assert probe.calls == [{"target": "moon"}]
    assert list(ToolCall.objects.filter(run=run).values_list("outcome", flat=True)) == ["completed"]


def test_a_tenant_at_its_share_of_workers_leaves_the_decided_run_to_a_look(people_tx, probe, settings):
    settings.HARBOR_TENANT_MAX_RUNNING = 1
    alice = people_tx.caller("alice")
    busy, _ = run_start(caller=alice, query="launch", agent_id="probe")
    drain()
    other, _ = run_start(caller=alice, query="launch", agent_id="probe")
    drain()
    Run.objects.filter(pk=busy.pk).update(
        lease_owner="elsewhere", lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    steering_submit(caller=alice, run_id=other.pk, method="approve", payload={})
    run = Run.objects.get(pk=other.pk)
    assert (run.status, run.lease_owner) == (RunStatus.RUNNING, "")  # not taken: acme holds its one worker
    assert not ToolCall.objects.filter(run=run).exists()
    assert drain() == 0  # the look keeps the same share
    Run.objects.filter(pk=busy.pk).update(lease_owner="", lease_expires_at=None)
    assert drain() == 1
    assert Run.objects.get(pk=other.pk).status == RunStatus.COMPLETE
    assert probe.calls == [{"target": "moon"}]


def test_a_late_hand_off_renews_a_lease_it_still_holds(people_tx, probe, monkeypatch):
    run = _approved(people_tx)
    [(lease, _)] = handoff._handed
    lease.written -= 3600  # it waited longer than a third of the lease
    renewed: list[bool] = []
    renew = Lease.renew

    def counted(self: Lease) -> bool:
        renewed.append(renew(self))
        return renewed[-1]

    monkeypatch.setattr(Lease, "renew", counted)
    assert drain() == 1
    assert renewed == [True]
    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETE
    assert probe.calls == [{"target": "moon"}]


def test_a_hand_off_whose_lease_lapsed_is_dropped_and_the_step_runs_once(people_tx, probe):
    run = _approved(people_tx)
    [(lease, _)] = handoff._handed
    lease.written -= 3600
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))  # lapsed
    assert drain() == 1  # dropped; the look claims the run and takes the step over
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert probe.calls == [{"target": "moon"}]
    outcomes = list(ToolCall.objects.filter(run=run).order_by("attempt").values_list("outcome", flat=True))
    assert outcomes == ["lost", "completed"]  # the handed attempt never ran its body
