"""Against a live Daphne, from another process (a management shell, as an admin's action
in another server process would be): an account deactivated or deleted, or its membership
removed, loses its open websocket. With Redis the close reaches every process at once; the
embedded default's in-memory layer reaches only its own, and the socket's periodic re-check
closes it there."""

import os
import time
import uuid

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.runs.test_live_frames import signed_in_cookie

SHELL = """
from django.contrib.auth.models import User
from runs.models import Membership, Role, Tenant
from runs.identity.permissions import membership_grant
{body}
print("ok")
"""
# Pushes cross processes over Redis; the embedded layer leaves the periodic re-check.
WITHIN = 3.0 if os.environ.get("REDIS_URL") else 15.0


class Person:
    def __init__(self, live_harbor) -> None:
        self.live = live_harbor
        self.name = f"leaver{uuid.uuid4().hex[:6]}"
        self.password = uuid.uuid4().hex
        self.shell(
            f"u = User.objects.create_user(username={self.name!r}, password={self.password!r}); "
            "membership_grant(tenant=Tenant.objects.get(slug='acme'), user=u, role=Role.APPROVER)"
        )

    def shell(self, body: str) -> None:
        self.live.manage("shell", "-c", SHELL.format(body=body))


@pytest.mark.parametrize(
    ("how", "code"),
    [
        ("u = User.objects.get(username={name!r}); u.is_active = False; u.save()", 4403),
        ("User.objects.get(username={name!r}).delete()", 4401),
        ("Membership.objects.filter(user__username={name!r}).delete()", 4403),
    ],
    ids=["deactivated", "deleted", "membership removed"],
)
def test_a_person_who_leaves_in_another_process_loses_their_socket(live_harbor, how, code):
    person = Person(live_harbor)
    cookie = signed_in_cookie_for(live_harbor, person)
    ws_url = live_harbor.url.replace("http://", "ws://") + "/ws/events/"
    with connect(ws_url, additional_headers={"Cookie": cookie, "Origin": live_harbor.url}, open_timeout=10) as ws:
        time.sleep(1)  # connected and checked
        person.shell(how.format(name=person.name))
        left = time.monotonic()
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.recv(timeout=WITHIN + 2)
        assert time.monotonic() - left < WITHIN
    assert closed.value.rcvd is not None and closed.value.rcvd.code == code


def signed_in_cookie_for(live_harbor, person: Person) -> str:
    class Logins:
        logins = {person.name: person.password}
        url = live_harbor.url

    return signed_in_cookie(Logins, person.name)
