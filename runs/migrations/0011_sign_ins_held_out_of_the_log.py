from django.db import migrations

SIGN_IN_KEYS = ("AuthorizeURL", "State")  # runs.domain.events.SIGN_IN_KEYS


def hold_sign_ins_out(apps, schema_editor):
    """Events written before a sign-in's address and state were held out of the log, as its
    token is: they are taken out of the stored payload and named among its held keys, so a
    read fills them in from the pause for those the token reaches, and for no one else."""
    Event = apps.get_model("runs", "Event")
    for event in Event.objects.filter(payload__has_key="AuthorizeURL").only("pk", "payload"):
        payload = dict(event.payload)
        if "_pause" not in payload:
            continue  # not a pause's event: nothing to fill it in from
        held = [key for key in SIGN_IN_KEYS if key in payload]
        for key in held:
            del payload[key]
        payload["_token_keys"] = [*payload.get("_token_keys", []), *held]
        Event.objects.filter(pk=event.pk).update(payload=payload)


class Migration(migrations.Migration):
    dependencies = [("runs", "0010_seal_credentials_in_the_steering_audit")]

    operations = [migrations.RunPython(hold_sign_ins_out, migrations.RunPython.noop)]
