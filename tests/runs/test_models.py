import pytest

from approvals.models import Pause
from runs.application import run_start, steering_submit
from runs.kernel.audit import AuditImmutable
from runs.models import Event, Instruction, SteeringInstruction
from runs.runtime.dispatch import drain


def test_the_steering_taxonomy_is_exactly_nine_instructions():
    assert sorted(Instruction.values) == sorted(
        ["cancel", "pause", "resume", "approve", "reject", "redirect", "inject_context", "user_message", "prioritize"]
    )


@pytest.fixture
def decided_run(people):
    alice = people.caller("alice")
    run, _ = run_start(caller=alice, query="deploy build 7 to staging", agent_id="deploy")
    drain()
    steering_submit(caller=people.caller("bob", "web"), run_id=run.pk, method="approve")
    return run


@pytest.mark.parametrize("model", [Pause, Event, SteeringInstruction])
def test_audit_rows_cannot_be_altered_or_deleted_through_the_orm(decided_run, model):
    row = model.objects.filter(**({"run": decided_run})).first()
    with pytest.raises(AuditImmutable):
        row.save()
    with pytest.raises(AuditImmutable):
        row.delete()
    with pytest.raises(AuditImmutable):
        model.objects.filter(pk=row.pk).update(pk=row.pk)
    with pytest.raises(AuditImmutable):
        model.objects.filter(pk=row.pk).delete()


def test_event_sequences_are_strictly_increasing_per_tenant(decided_run, people):
    sequences = list(Event.objects.filter(tenant=people.acme).values_list("sequence", flat=True))
    assert sequences == list(range(1, len(sequences) + 1))
