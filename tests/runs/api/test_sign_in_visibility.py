"""A sign-in's address and one-time state (a tool_oauth pause, an a2a sign-in) complete the
sign-in for whoever holds them: they reach only those its resume token reaches (PROTOCOL §4),
on every read: pause.list, tasks/get, the event log, the pages."""

import json
from importlib import import_module

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import Client

from approvals.models import Cause, Pause, Reason
from runs.domain import events
from runs.domain import push as live_push
from runs.domain.tokens import sign_in_unseal
from runs.runtime.dispatch import drain
from runs.runtime.planner import CallTool, Finish
from runs.runtime.registry import Agent, register_agent, unregister_agent
from runs.runtime.tools import Tool, ToolPause
from runs.streams.reads import pushed_envelope, read_after

STATE = "hrbs_" + "s" * 43
URL = f"https://provider.test/authorize?state={STATE}"


@pytest.fixture
def signing():
    def read(args, ctx):
        if ctx.resumed is None:
            raise ToolPause(
                cause=Cause.TOOL_OAUTH,
                reason=Reason.EXTERNAL_EVENT,
                payload={"SourceName": "Calendar", "AuthorizeURL": URL, "State": STATE, "Scopes": ["read"]},
                companion=events.TOOL_AUTH_REQUIRED,
            )
        return {"ok": True}

    class Planner:
        def decide(self, view):
            return Finish("done") if view.history else CallTool("read", {})

    register_agent(Agent(id="signing", description="test", planner=Planner, tools={"read": Tool("read", read)}))
    yield
    unregister_agent("signing")


def test_a_sign_in_reaches_only_those_its_token_reaches(api, people, signing):
    run = api.start("read my calendar", "signing")
    drain()
    for user, shown in (("alice", True), ("bob", False), ("olivia", False)):
        listed = api.ok("/v1/pause/list", {"filter": {"run_ids": [run]}}, user=user)["snapshots"]
        detail = api.post("/v1/tasks/get", {"identity": {"run": run}}, user=user).json().get("pauses", [])
        for snapshot in listed + detail:
            assert (snapshot["payload"].get("AuthorizeURL"), snapshot["payload"].get("State")) == (
                (URL, STATE) if shown else (None, None)
            ), user
            assert snapshot["payload"]["SourceName"] == "Calendar"
        envelopes, _ = read_after(caller=people.caller(user), cursor=0, run_id=run)
        required = [e["payload"] for e in envelopes if e["type"] == "tool.auth_required"]
        assert all((p["AuthorizeURL"], p["State"]) == ((URL, STATE) if shown else (None, None)) for p in required)
        assert required or user == "olivia" or not shown  # the owner hears it
        if not shown:  # the pages of those who may view the run but not decide its pause
            page = Client()
            page.force_login(User.objects.get(username=user))
            html = page.get(f"/console/runs/{run}/").content.decode() + page.get("/inbox/").content.decode()
            assert "Calendar" in html and STATE not in html and "data-oauth-signin" not in html, user
    stored = events.Event.objects.get(run_id=run, type="tool.auth_required").payload
    assert "AuthorizeURL" not in stored and "State" not in stored  # the log holds the pause's reference


def test_a_sign_in_is_sealed_at_rest(api, signing):
    """A copy of the database holds no state that completes the sign-in: the pause keeps it
    sealed, as its resume token, and so does a pause parked before (migration 0009)."""
    run = api.start("read my calendar", "signing")
    drain()
    stored = Pause.objects.get(run_id=run).payload
    assert STATE not in json.dumps(stored) and stored["SourceName"] == "Calendar"
    assert sign_in_unseal(stored) == {"AuthorizeURL": URL, "State": STATE}

    migrated_apps = MigrationLoader(connection).project_state().apps  # as a migration sees the models
    parked_before = {"SourceName": "Calendar", "AuthorizeURL": URL, "State": STATE}
    migrated_apps.get_model("approvals", "Pause").objects.filter(run_id=run).update(payload=parked_before)
    import_module("approvals.migrations.0009_sign_ins_sealed_at_rest").seal_sign_ins(migrated_apps, None)
    migrated = Pause.objects.get(run_id=run).payload
    assert STATE not in json.dumps(migrated) and sign_in_unseal(migrated) == {"AuthorizeURL": URL, "State": STATE}
    assert api.ok("/v1/pause/list", {"filter": {"run_ids": [run]}})["snapshots"][0]["payload"]["State"] == STATE


def test_a_pushed_sign_in_is_filled_in_only_for_a_stream_that_may_decide(api, signing):
    run = api.start("read my calendar", "signing")
    drain()
    row = events.Event.objects.get(run_id=run, type="tool.auth_required")
    pause = Pause.objects.get(run_id=run)
    item = live_push._published(row, pause)
    assert STATE not in json.dumps(item)  # it crosses Redis sealed, as the token does
    for may_decide, shown in ((True, (URL, STATE)), (False, (None, None))):
        payload = pushed_envelope(item, tenant_slug="acme", with_token=may_decide)["payload"]
        assert (payload["AuthorizeURL"], payload["State"]) == shown
