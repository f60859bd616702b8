"""Policy versions: each save a new one with its author, none edited, the latest in force;
two saves at once get consecutive versions."""

import threading

import pytest
from django.db import connection

from approvals.models import ApprovalPolicy
from approvals.policy import policy_active, policy_save
from runs.kernel.audit import AuditImmutable
from tests.conftest import requires_postgres

from .conftest import user

RULE = '@id("{name}") permit (principal, action, resource == Harbor::Tool::"deploy_to_production");'


def test_versions_are_kept_with_their_author_and_note(release, tool_schemas):
    first = policy_save(
        tenant=release.acme, source=RULE.format(name="one"), author=user("ada"), tool_schemas=tool_schemas
    )
    second = policy_save(
        tenant=release.acme,
        source=RULE.format(name="two"),
        author=user("olivia"),
        note="tighter",
        tool_schemas=tool_schemas,
    )
    other = policy_save(tenant=release.globex, source=RULE.format(name="g"), author=None, tool_schemas=tool_schemas)
    rows = ApprovalPolicy.objects.filter(tenant=release.acme).order_by("version")
    assert [(p.version, p.author.username, p.note, p.source) for p in rows] == [
        (1, "ada", "", first.source),
        (2, "olivia", "tighter", second.source),
    ]
    assert other.version == 1  # numbered per tenant
    assert policy_active(release.acme) == second and policy_active(release.globex) == other


def test_a_version_is_never_edited_or_deleted(release, tool_schemas):
    saved = policy_save(tenant=release.acme, source=RULE.format(name="one"), author=None, tool_schemas=tool_schemas)
    saved.source = RULE.format(name="changed")
    with pytest.raises(AuditImmutable):
        saved.save()
    with pytest.raises(AuditImmutable):
        ApprovalPolicy.objects.filter(pk=saved.pk).update(note="x")
    with pytest.raises(AuditImmutable):
        saved.delete()


@requires_postgres
@pytest.mark.postgres
def test_two_saves_at_once_get_consecutive_versions(people_tx, tool_schemas):
    people = people_tx
    policy_save(tenant=people.acme, source=RULE.format(name="base"), author=None, tool_schemas=tool_schemas)
    for round_ in range(3):  # with a latest version to lock, and racing to be the first after it
        start = threading.Barrier(2)
        saved: list[int] = []
        failed: list[BaseException] = []

        def save(name: str) -> None:
            try:
                start.wait()
                row = policy_save(
                    tenant=people.acme, source=RULE.format(name=name), author=None, tool_schemas=tool_schemas
                )
                saved.append(row.version)
            except BaseException as error:  # reported below, not lost in the thread
                failed.append(error)
            finally:
                connection.close()

        threads = [threading.Thread(target=save, args=(f"r{round_}-{i}",)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not failed, failed
        assert sorted(saved) == [2 + 2 * round_, 3 + 2 * round_]
    versions = list(ApprovalPolicy.objects.filter(tenant=people.acme).values_list("version", flat=True))
    assert sorted(versions) == list(range(1, 8))


@requires_postgres
@pytest.mark.postgres
def test_the_first_two_saves_at_once_get_one_and_two(people_tx, tool_schemas):
    people = people_tx
    start = threading.Barrier(2)
    saved: list[int] = []

    def save(name: str) -> None:
        try:
            start.wait()
            saved.append(
                policy_save(
                    tenant=people.acme, source=RULE.format(name=name), author=None, tool_schemas=tool_schemas
                ).version
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=save, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(saved) == [1, 2]
