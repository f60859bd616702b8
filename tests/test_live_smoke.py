"""The live server fixture itself: the product answers its health URL and an admin can
sign in to the Django admin, in whichever topology the suite runs."""

import re

import httpx


def test_live_server_serves_health_and_admin_login(live_harbor):
    assert httpx.get(f"{live_harbor.url}/healthz").json() == {"status": "ok"}
    assert set(live_harbor.logins) == {"alice", "bob", "olivia", "admin", "gina"}
    with httpx.Client(base_url=live_harbor.url) as client:
        page = client.get("/admin/login/")
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert found, page.text[:300]
        csrf = found.group(1)
        signed_in = client.post(
            "/admin/login/?next=/admin/",
            data={"csrfmiddlewaretoken": csrf, "username": "admin", "password": live_harbor.logins["admin"]},
            headers={"Referer": f"{live_harbor.url}/admin/login/"},
            follow_redirects=True,
        )
    assert signed_in.status_code == 200 and "Log out" in signed_in.text
