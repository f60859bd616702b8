"""Signing in: a lockout after repeated failures (django-axes), user names normalised, and
the tenant switcher for people in more than one tenant."""

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from runs.domain import selectors
from runs.identity.permissions import membership_grant
from runs.identity.sessions import SessionStore
from runs.models import Role, Run
from tests.factories import SuperuserFactory


@pytest.fixture
def lockout(settings):
    settings.AXES_ENABLED = True


def _sign_in(client, username, password):
    return client.post("/login/", {"username": username, "password": password})


def test_forty_wrong_passwords_then_the_right_one_does_not_sign_in(people, lockout):
    client = Client()
    for n in range(40):
        _sign_in(client, "alice", f"guess-{n}")
    response = _sign_in(client, "alice", "alice-password")
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    page = response.content.decode()
    assert "Sign-in temporarily locked" in page and "Try again in 15 minutes" in page
    # Another spelling of the same account is the same account.
    assert _sign_in(client, "ALICE ", "alice-password").status_code == 429
    assert client.get("/console/").status_code == 302  # still signed out


def test_the_lockout_is_per_account_and_address_and_shown_to_admins(people, lockout):
    client = Client()
    for n in range(4):
        assert _sign_in(client, "alice", f"guess-{n}").status_code == 200  # the form, with an error
    assert _sign_in(client, "alice", "guess-4").status_code == 429  # the fifth failure locks
    assert _sign_in(client, "alice", "alice-password").status_code == 429
    # bob is not locked out by alice's failures.
    assert _sign_in(Client(), "bob", "bob-password").status_code == 302
    attempt = AccessAttempt.objects.get()
    assert attempt.username == "alice" and attempt.failures_since_start >= 5
    admin = SuperuserFactory.create(username="root")
    staff = Client()
    staff.force_login(admin)
    listing = staff.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and "alice" in listing.content.decode()


def test_a_right_password_below_the_limit_signs_in_and_resets(people, lockout):
    client = Client()
    for n in range(3):
        _sign_in(client, "alice", f"guess-{n}")
    assert _sign_in(client, "Alice", "alice-password").status_code == 302
    assert not AccessAttempt.objects.exists()


def test_a_look_alike_user_name_does_not_sign_in(people):
    assert _sign_in(Client(), "\u0430lice", "alice-password").status_code == 200  # the form again


# --- The tenant switcher --------------------------------------------------------------------


def _active_tenant(user, client: Client) -> str | None:
    """The slug of the tenant the pages act in for this signed-in client."""
    membership = selectors.membership_for_user(user=user, session=client.session)
    return membership.tenant.slug if membership else None


def test_a_person_in_two_tenants_switches_between_them(people):
    alice = get_user_model().objects.get(username="alice")
    membership_grant(tenant=people.globex, user=alice, role=Role.MEMBER)
    client = Client()
    client.force_login(alice)
    page = client.get("/console/").content.decode()
    assert 'name="tenant"' in page and "Globex" in page
    assert _active_tenant(alice, client) == "acme"
    response = client.post("/tenant/", {"tenant": "globex"})
    assert response.status_code == 302
    assert _active_tenant(alice, client) == "globex"
    response = client.post("/console/new/", {"agent_id": "countdown", "query": "count to 2", "priority": 0})
    assert Run.objects.get().tenant.slug == "globex"
    # Another tenant than one's own is refused, and changes nothing.
    client.post("/tenant/", {"tenant": "initech"})
    assert _active_tenant(alice, client) == "globex"


def test_a_revoked_active_tenant_falls_back_to_a_remaining_membership(people):
    from runs.identity.permissions import membership_revoke

    alice = get_user_model().objects.get(username="alice")
    membership_grant(tenant=people.globex, user=alice, role=Role.MEMBER)
    client = Client()
    client.force_login(alice)
    client.post("/tenant/", {"tenant": "globex"}, follow=True)
    membership_revoke(tenant=people.globex, user=alice)
    assert _active_tenant(alice, client) == "acme"
    assert "Globex" not in client.get("/console/").content.decode()


def test_a_single_tenant_person_sees_no_switcher(people):
    client = Client()
    client.force_login(get_user_model().objects.get(username="alice"))
    assert 'name="tenant"' not in client.get("/console/").content.decode()


def test_an_account_made_with_capitals_is_stored_normalised_and_signs_in(people):
    user = get_user_model().objects.create_user(username="  Carol ", password="carol-password")
    assert user.username == "carol"
    assert _sign_in(Client(), "CAROL", "carol-password").status_code == 302


@pytest.mark.parametrize("planted_by", ["bob", "alice"])
def test_a_planted_session_cookie_does_not_survive_a_password_sign_in(people, planted_by):
    """A session cookie planted in the browser (the attacker's own sign-in, or one of the
    person's) is replaced at the sign-in: the key it names signs no one in afterwards."""
    attacker = Client()
    assert _sign_in(attacker, planted_by, f"{planted_by}-password").status_code == 302
    planted = attacker.cookies[settings.SESSION_COOKIE_NAME].value
    victim = Client()
    victim.cookies[settings.SESSION_COOKIE_NAME] = planted
    assert _sign_in(victim, "alice", "alice-password").status_code == 302
    assert victim.cookies[settings.SESSION_COOKIE_NAME].value != planted
    assert victim.session["_auth_user_id"] == str(get_user_model().objects.get(username="alice").pk)
    assert "_auth_user_id" not in SessionStore(planted).load()
    assert attacker.get("/console/").status_code == 302  # the planted key is signed out
