from django.db import migrations

SEALED = "<sealed>"  # runs.domain.events.SEALED


def seal_answered_credentials(apps, schema_editor):
    """A resume that answered a remote agent's auth request carried a credential, sealed on
    its pause but kept in plaintext by the steering audit. On every run with such a pause,
    each resume's input is replaced by the placeholder the audit now writes."""
    Pause = apps.get_model("approvals", "Pause")
    SteeringInstruction = apps.get_model("runs", "SteeringInstruction")
    runs = Pause.objects.filter(cause="a2a", decision="resume", decision_input__has_key="sealed").values("run_id")
    for instruction in SteeringInstruction.objects.filter(run_id__in=runs, instruction="resume"):
        if instruction.payload.get("input") not in (None, SEALED):
            SteeringInstruction.objects.filter(pk=instruction.pk).update(payload={**instruction.payload, "input": SEALED})


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0009_steering_created_when_made"),
        ("approvals", "0008_ulid_keys_without_like_indexes"),
    ]

    operations = [migrations.RunPython(seal_answered_credentials, migrations.RunPython.noop)]
