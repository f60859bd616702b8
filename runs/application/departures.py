"""When a person leaves: a membership removed (by the service, the admin, a cascade or a
shell), an account deactivated or deleted. Their live streams are told at once, in every
process (the push goes through the same channel as events: Redis where configured), and
re-check the person before they send another frame; the periodic re-check is only the
backstop. A membership's delegations end with it, so a person added back as a plain member
never decides with what they were lent before."""

from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from guardian.models import UserObjectPermission

from approvals.models import Pause
from runs.domain import push
from runs.identity.permissions import access_changed
from runs.models import Membership, Run


def delegations_end(*, tenant_id: int, user_id: int) -> None:
    """Delete the person's object-permission rows on the tenant's runs and pauses (a
    delegation is a handful of rows per person: they are read, then checked by tenant)."""
    rows = list(
        UserObjectPermission.objects.filter(
            user_id=user_id, content_type__in=ContentType.objects.get_for_models(Run, Pause).values()
        ).values_list("pk", "content_type_id", "object_pk")
    )
    if not rows:
        return
    in_tenant: set[tuple[int, str]] = set()
    for model in (Run, Pause):
        kind = ContentType.objects.get_for_model(model).pk
        named = [object_pk for _, content_type, object_pk in rows if content_type == kind]
        in_tenant.update(
            (kind, str(pk))
            for pk in model.objects.filter(tenant_id=tenant_id, pk__in=named).values_list("pk", flat=True)
        )
    UserObjectPermission.objects.filter(
        pk__in=[pk for pk, content_type, object_pk in rows if (content_type, object_pk) in in_tenant]
    ).delete()


def _close_after_commit(user_id: int, tenant_id: int | None = None) -> None:
    transaction.on_commit(lambda: push.close_streams(user_id=user_id, tenant_id=tenant_id))


@receiver(post_delete, sender=Membership, dispatch_uid="harbor-membership-gone")
def _membership_gone(sender: type, instance: Membership, **kwargs: object) -> None:
    delegations_end(tenant_id=instance.tenant_id, user_id=instance.user_id)
    _close_after_commit(instance.user_id, instance.tenant_id)


@receiver(post_save, sender=User, dispatch_uid="harbor-account-deactivated")
def _account_deactivated(sender: type, instance: User, **kwargs: object) -> None:
    if not instance.is_active:
        _close_after_commit(instance.pk)


@receiver(post_delete, sender=User, dispatch_uid="harbor-account-deleted")
def _account_deleted(sender: type, instance: User, **kwargs: object) -> None:
    _close_after_commit(instance.pk)


@receiver(access_changed, dispatch_uid="harbor-access-changed")
def _access_changed(sender: type, user_id: int, tenant_id: int, **kwargs: object) -> None:
    push.close_streams(user_id=user_id, tenant_id=tenant_id)
