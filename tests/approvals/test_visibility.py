"""Who sees and decides what follows from the membership (runs.identity.visibility): no
object-permission rows for what a role grants, explicit delegation to one person, and
reads whose statement count does not grow with the tenant's history."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from guardian.models import GroupObjectPermission, UserObjectPermission

from approvals.domain.selectors import pause_list, pauses_decidable, token_visibility
from approvals.models import Pause
from runs.application import run_start, steering_submit
from runs.domain.selectors import runs_visible
from runs.domain.tokens import token_unseal
from runs.identity.permissions import delegate, membership_grant, membership_revoke
from runs.kernel.errors import NotFound
from runs.models import Membership, Role
from runs.protocol.serializers import PauseListResponseSerializer
from runs.runtime.dispatch import drain


def snapshots(caller, **filters) -> list[dict]:
    """pause.list as the /v1 route renders it (tokens only where the decision rule allows)."""
    page = pause_list(caller=caller, **filters)
    may_see_token = token_visibility(caller=caller, pause_ids=[p.pk for p in page.rows])
    return PauseListResponseSerializer(page, context={"may_see_token": may_see_token}).data["snapshots"]


def park(people) -> Pause:
    run, _ = run_start(caller=people.caller("alice"), query="launch", agent_id="probe")
    drain()
    return Pause.objects.get(run=run)


def test_a_run_and_its_pause_write_no_object_permission_rows(people, probe):
    park(people)
    assert UserObjectPermission.objects.count() == 0
    assert GroupObjectPermission.objects.count() == 0


def test_roles_see_and_decide_from_the_membership_at_once(people, probe):
    pause = park(people)
    mallory = people.caller("mallory")
    assert list(pauses_decidable(caller=mallory)) == []
    assert snapshots(caller=mallory) == []
    membership_grant(tenant=people.acme, user=mallory.user, role=Role.APPROVER)
    mallory = people.caller("mallory")
    assert [p.pk for p in pauses_decidable(caller=mallory)] == [pause.pk]
    assert snapshots(caller=mallory)[0]["token"] == token_unseal(pause.token_sealed)
    membership_grant(tenant=people.acme, user=mallory.user, role=Role.MEMBER)
    mallory = people.caller("mallory")
    assert list(pauses_decidable(caller=mallory)) == []
    assert list(runs_visible(caller=mallory)) == []
    # An operator sees the pause but is shown no token: it cannot decide a gate.
    snapshot = snapshots(people.caller("olivia"))[0]
    assert snapshot["pause_id"] == pause.pk and snapshot["token"] is None


def test_an_explicit_delegation_lets_one_member_decide_one_pause(people, probe):
    delegated, other = park(people), park(people)
    mallory = people.caller("mallory")
    with pytest.raises(NotFound):
        steering_submit(caller=mallory, run_id=delegated.run_id, method="approve", payload={})
    delegate(delegated.run, user=mallory.user, permission="view_run")
    delegate(delegated, user=mallory.user, permission="view_pause")
    delegate(delegated, user=mallory.user, permission="decide_pause")
    assert [p.pk for p in pauses_decidable(caller=mallory)] == [delegated.pk]
    assert [s["pause_id"] for s in snapshots(caller=mallory)] == [delegated.pk]
    steering_submit(caller=mallory, run_id=delegated.run_id, method="approve", payload={})
    delegated.refresh_from_db()
    assert delegated.decision == "approve" and delegated.decided_by == mallory.user
    with pytest.raises(NotFound):  # the other pause was never delegated
        steering_submit(caller=mallory, run_id=other.run_id, method="approve", payload={})
    assert Pause.objects.get(pk=other.pk).is_open


def test_a_delegation_never_crosses_tenants(people, probe):
    pause = park(people)
    with pytest.raises(ValueError):
        delegate(pause, user=people.caller("gina").user, permission="decide_pause")
    assert UserObjectPermission.objects.count() == 0


@pytest.mark.parametrize("who", ["bob", "alice", "mallory"])
def test_a_pause_list_page_costs_the_same_whatever_the_history(people, probe, who):
    park(people)
    caller = people.caller(who)
    pause_list(caller=caller)  # warm the content-type cache a long-lived process has
    with CaptureQueriesContext(connection) as small:
        pause_list(caller=caller)
    for _ in range(5):
        park(people)
    caller = people.caller(who)
    pause_list(caller=caller)
    with CaptureQueriesContext(connection) as large:
        pause_list(caller=caller)
    assert len(large) == len(small) <= 4, [q["sql"] for q in large.captured_queries]


def test_delegations_end_with_the_membership(people, probe):
    """Removed and added back as a plain member, a person decides nothing with what they
    were lent before; their delegations in other tenants stay."""
    pause = park(people)
    mallory = people.caller("mallory")
    delegate(pause.run, user=mallory.user, permission="view_run")
    delegate(pause, user=mallory.user, permission="decide_pause")
    membership_grant(tenant=people.globex, user=mallory.user, role=Role.MEMBER)
    gina = people.caller("gina")
    theirs, _ = run_start(caller=gina, query="launch", agent_id="probe")
    drain()
    delegate(Pause.objects.get(run=theirs), user=mallory.user, permission="decide_pause")
    membership_revoke(tenant=people.acme, user=mallory.user)
    membership_grant(tenant=people.acme, user=mallory.user, role=Role.MEMBER)
    mallory = people.caller("mallory")
    assert list(pauses_decidable(caller=mallory)) == []
    with pytest.raises(NotFound):
        steering_submit(caller=mallory, run_id=pause.run_id, method="approve", payload={})
    assert Pause.objects.get(pk=pause.pk).is_open
    assert list(UserObjectPermission.objects.filter(user=mallory.user).values_list("object_pk", flat=True)) == [
        Pause.objects.get(run=theirs).pk
    ]


def test_a_membership_deleted_outside_the_service_ends_its_delegations_too(people, probe):
    pause = park(people)
    mallory = people.caller("mallory")
    delegate(pause, user=mallory.user, permission="decide_pause")
    Membership.objects.filter(tenant=people.acme, user=mallory.user).delete()  # a shell, a cascade
    assert not UserObjectPermission.objects.filter(user=mallory.user).exists()
