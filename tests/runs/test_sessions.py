"""A copy of the database alone holds no usable login session (runs.identity.sessions)."""

from django.conf import settings
from django.contrib.sessions.models import Session
from django.test import Client

from approvals.models import Pause
from runs.application import run_start
from runs.models import RunStatus
from runs.runtime.dispatch import drain


def _signed_in_client(name):
    client = Client()
    response = client.post("/login/", {"username": name, "password": f"{name}-password"})
    assert response.status_code == 302
    return client


def test_a_session_key_read_from_the_table_does_not_authenticate(people, probe):
    run, _ = run_start(caller=people.caller("alice"), query="launch", agent_id="probe")
    drain()
    pause = Pause.objects.get(run=run)
    bob = _signed_in_client("bob")
    cookie = bob.cookies[settings.SESSION_COOKIE_NAME].value
    assert bob.get("/inbox/").status_code == 200
    rows = list(Session.objects.values_list("session_key", flat=True))
    assert rows and cookie not in rows  # the table never holds the cookie's key

    for stolen in rows:  # the attacker replays every key in the copied table
        thief = Client()
        thief.cookies[settings.SESSION_COOKIE_NAME] = stolen
        assert thief.get("/inbox/").status_code == 302  # to the sign-in page
        thief.post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve"})
    pause.refresh_from_db()
    run.refresh_from_db()
    assert pause.is_open and run.status == RunStatus.PAUSED
    # The real cookie, by contrast, decides: the thief's attempt was refused, not malformed.
    bob.post(f"/inbox/pauses/{pause.pk}/decide/", {"method": "approve"})
    pause.refresh_from_db()
    assert not pause.is_open and pause.decided_by.username == "bob"


def test_sessions_still_work_and_sign_out_removes_the_row(people):
    client = _signed_in_client("alice")
    assert client.get("/console/").status_code == 200
    assert Session.objects.count() == 1
    client.post("/logout/")
    assert Session.objects.count() == 0
    assert client.get("/console/").status_code == 302


def test_a_new_key_on_sign_in_replaces_the_old_row(people):
    client = Client()
    client.get("/login/")
    client.cookies[settings.SESSION_COOKIE_NAME] = "x" * 32
    _ = client.post("/login/", {"username": "alice", "password": "alice-password"})
    assert Session.objects.count() == 1
    assert client.get("/console/").status_code == 200
