from django.db import migrations

from runs.domain.tokens import SIGN_IN_KEYS, sign_in_seal


def seal_sign_ins(apps, schema_editor):
    """Pauses parked before a sign-in's address and one-time state were sealed in their
    payload (as their resume token is) keep them sealed from now on: a copy of the database
    no longer holds a state that completes a sign-in."""
    Pause = apps.get_model("approvals", "Pause")
    for key in SIGN_IN_KEYS:
        for pause in Pause.objects.filter(payload__has_key=key).only("pk", "payload"):
            Pause.objects.filter(pk=pause.pk).update(payload=sign_in_seal(pause.payload))


class Migration(migrations.Migration):
    dependencies = [("approvals", "0008_ulid_keys_without_like_indexes")]

    operations = [migrations.RunPython(seal_sign_ins, migrations.RunPython.noop)]
