"""Role-derived object-permission rows are no longer written nor read (runs.identity.
visibility decides them from the membership): remove the ones earlier versions wrote, the
role groups' rows and the owner's `view` rows. Explicit delegations to a person stay."""

from django.db import migrations
from django.db.models import Exists, OuterRef


def forwards(apps, schema_editor) -> None:
    content_types = apps.get_model("contenttypes", "ContentType").objects
    user_rows = apps.get_model("guardian", "UserObjectPermission").objects
    group_rows = apps.get_model("guardian", "GroupObjectPermission").objects
    run_type = content_types.filter(app_label="runs", model="run").first()
    pause_type = content_types.filter(app_label="approvals", model="pause").first()
    kinds = [
        (run_type, "view_run", apps.get_model("runs", "Run").objects, "owner_id"),
        (pause_type, "view_pause", apps.get_model("approvals", "Pause").objects, "run__owner_id"),
    ]
    for content_type, view, objects, owner in kinds:
        if content_type is None:  # a new database: nothing was written
            continue
        group_rows.filter(content_type=content_type, group__name__startswith="tenant-").delete()
        owned = objects.filter(pk=OuterRef("object_pk"), **{owner: OuterRef("user_id")})
        user_rows.filter(content_type=content_type, permission__codename=view).filter(Exists(owned)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0003_visibility_indexes"),
        ("runs", "0003_visibility_indexes"),
        ("guardian", "0002_generic_permissions_index"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
