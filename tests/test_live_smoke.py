"""The live server fixture itself: the product answers its health URL and an admin can
sign in to the Django admin, in whichever topology the suite runs."""

import json
import re
import socket
import time

import httpx


def test_live_server_serves_health_and_admin_login(live_harbor):
    assert httpx.get(f"{live_harbor.url}/healthz").json() == {"status": "ok"}
    assert set(live_harbor.logins) == {"alice", "bob", "carol", "olivia", "admin", "gina"}
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


def test_the_access_log_leaves_out_a_sign_ins_state_and_code(live_harbor):
    httpx.get(f"{live_harbor.url}/v1/tools/oauth/callback?state=st-4f2a9c&code=cd-81e7b0", headers={"Accept": "*/*"})
    httpx.get(f"{live_harbor.url}/accounts/sign-in/begin/?state=st-77d1e3")
    httpx.get(f"{live_harbor.url}/healthz?check=1")
    log = live_harbor.var_dir / "server.log"
    for _ in range(50):  # the access log is written as each response completes
        if "/healthz?check=1" in log.read_text():
            break
        time.sleep(0.1)
    text = log.read_text()
    assert "/v1/tools/oauth/callback?state=[redacted]&code=[redacted]" in text
    assert "/accounts/sign-in/begin/?state=[redacted]" in text
    assert not any(secret in text for secret in ("st-4f2a9c", "cd-81e7b0", "st-77d1e3"))


def _raw(url: str, request: bytes) -> bytes:
    """Send bytes as they are (no client would send these) and read the whole answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_requests_the_http_server_refuses_get_the_protocols_json_error(live_harbor):
    for request in (
        b"POST /v1/pause/list HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ten\r\n\r\n{}",
        b"POST /v1/pause/list HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n{}",
        b"POST /v1/pause/list HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"GET /v1/\xff HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"POST /v1/pause/list?" + b"x" * 20_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"y" * 20_000 + b"\r\n\r\n",
    ):
        head, _, body = _raw(live_harbor.url, request).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 ") and b"Content-Type: application/json" in head, head
        assert json.loads(body)["code"] == "invalid_request"
