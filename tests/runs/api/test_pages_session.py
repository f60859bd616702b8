"""The pages act for a person under one session element of their own (`pages`, the same on
every login): a bearer token may not claim it, and an API client under its own session sees
the pages' pauses without their tokens (PROTOCOL §1, §4)."""

from django.test import Client

from approvals.models import Pause
from runs.runtime.dispatch import drain


def test_a_token_may_not_claim_the_pages_session(api):
    refused = api.error("/v1/pause/list", {}, session="pages", status=401, code="auth_rejected")
    assert "belongs to the web pages" in refused["message"]
    header = api.error(
        "/v1/pause/list", {}, headers={"X-Harbor-Session": "pages"}, status=401, code="identity_required"
    )
    assert "belongs to the web pages" in header["message"]


def test_an_api_client_of_alice_sees_her_pages_pause_without_its_token(api):
    pages = Client()
    pages.login(username="alice", password="alice-password")
    pages.post("/console/new/", {"agent_id": "deploy", "query": "deploy build 9 to staging", "priority": 0})
    drain()
    pause = Pause.objects.get(state="paused")
    assert pause.identity_session == "pages"
    [snapshot] = api.ok("/v1/pause/list", {"filter": {"run_ids": [pause.run_id]}}, session="s1")["snapshots"]
    assert snapshot["identity"]["session"] == "pages" and snapshot["token"] is None
    refused = api.control("approve", pause.run_id, session="s1")
    assert refused.status_code == 403 and Pause.objects.get(pk=pause.pk).state == "paused"
