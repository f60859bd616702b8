"""harbor_policy (check, load, show), the admin's groups and versions, and the demo's seed."""

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from approvals.models import ApprovalPolicy, ApproverGroup
from runs.models import Membership
from tests.factories import SuperuserFactory

from .conftest import DEMO_POLICY

DEMO_RULES = [
    "  production deploys: deploy_to_production when environment is production: "
    "2 approvals from release-managers, never the requester, a reason to reject",
    "  staging deploys: deploy_to_production when environment is staging: 1 approval from any approver, never the requester",
]


def run(*args: str) -> str:
    out = StringIO()
    call_command("harbor_policy", *args, stdout=out)
    return out.getvalue()


def test_check_prints_each_rule_in_plain_words(db):
    assert run("check", str(DEMO_POLICY)).splitlines() == DEMO_RULES
    assert not ApprovalPolicy.objects.exists()


def test_check_against_a_tenant_also_checks_its_groups(release):
    assert run("check", str(DEMO_POLICY), "--tenant", "acme").splitlines() == DEMO_RULES
    with pytest.raises(CommandError, match='no approver group "release-managers" in this tenant'):
        run("check", str(DEMO_POLICY), "--tenant", "globex")


def test_load_saves_the_next_version_and_show_prints_it(release):
    out = run("load", str(DEMO_POLICY), "--tenant", "acme", "--author", "ada", "--note", "from the repo")
    assert out.splitlines() == ["acme: version 1 is in force", *DEMO_RULES]
    assert run("load", str(DEMO_POLICY), "--tenant", "acme").splitlines()[0] == "acme: version 2 is in force"
    shown = run("show", "--tenant", "acme").splitlines()
    assert shown[0].startswith("acme: version 2, saved ") and shown[1:] == DEMO_RULES
    first = ApprovalPolicy.objects.select_related("author").get(tenant=release.acme, version=1)
    assert (first.author and first.author.username, first.note) == ("ada", "from the repo")


def test_show_without_a_policy_says_the_defaults_apply(release):
    assert run("show", "--tenant", "acme") == "acme: no policy; the protocol's defaults apply\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["load", "/nonexistent.cedar", "--tenant", "acme"], "cannot read /nonexistent.cedar"),
        (["load", str(DEMO_POLICY), "--tenant", "initech"], "no tenant initech"),
        (["load", str(DEMO_POLICY), "--tenant", "acme", "--author", "nobody"], "no user nobody"),
    ],
)
def test_load_refuses_what_it_cannot_find(release, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not ApprovalPolicy.objects.exists()


# --- the admin --------------------------------------------------------------------------------


@pytest.fixture
def root(client):
    admin = SuperuserFactory.create(username="root")
    client.force_login(admin)
    return admin


def test_the_admin_adds_a_version_authored_by_the_admin(release, root, client):
    source = DEMO_POLICY.read_text()
    response = client.post(
        "/admin/approvals/approvalpolicy/add/", {"tenant": release.acme.pk, "source": source, "note": "via admin"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    saved = ApprovalPolicy.objects.get(tenant=release.acme)
    assert (saved.version, saved.author, saved.note, saved.source) == (1, root, "via admin", source.strip())
    listing = client.get("/admin/approvals/approvalpolicy/").content.decode()
    assert "via admin" in listing and "root" in listing and "Version" in listing and "Author" in listing


def test_a_saved_version_is_read_only_in_the_admin(release, root, client):
    client.post(
        "/admin/approvals/approvalpolicy/add/",
        {"tenant": release.acme.pk, "source": DEMO_POLICY.read_text(), "note": "v1"},
    )
    saved = ApprovalPolicy.objects.get(tenant=release.acme)
    page = client.get(f"/admin/approvals/approvalpolicy/{saved.pk}/change/")
    assert page.status_code == 200 and "production deploys" in page.content.decode()
    assert 'name="source"' not in page.content.decode()  # shown, not editable
    changed = client.post(
        f"/admin/approvals/approvalpolicy/{saved.pk}/change/", {"tenant": release.acme.pk, "source": "", "note": "edit"}
    )
    assert changed.status_code == 403
    assert client.post(f"/admin/approvals/approvalpolicy/{saved.pk}/delete/", {"post": "yes"}).status_code == 403
    assert list(ApprovalPolicy.objects.values_list("version", "note")) == [(1, "v1")]


def test_approver_groups_are_edited_in_the_admin(release, root, client):
    group = ApproverGroup.objects.get(name="release-managers")
    page = client.get(f"/admin/approvals/approvergroup/{group.pk}/change/").content.decode()
    assert "selectfilter" in page.lower() or "SelectFilter" in page  # the members' filter widget
    alice = User.objects.get(username="alice")
    response = client.post(
        f"/admin/approvals/approvergroup/{group.pk}/change/",
        {"tenant": release.acme.pk, "name": "release-managers", "members": [alice.pk]},
    )
    assert response.status_code == 302
    assert list(group.members.values_list("username", flat=True)) == ["alice"]
    gina = User.objects.get(username="gina")  # of globex
    refused = client.post(
        f"/admin/approvals/approvergroup/{group.pk}/change/",
        {"tenant": release.acme.pk, "name": "release-managers", "members": [alice.pk, gina.pk]},
    )
    assert refused.status_code == 200 and "not members of acme: gina" in refused.content.decode()
    assert list(group.members.values_list("username", flat=True)) == ["alice"]


# --- the demo ---------------------------------------------------------------------------------


def test_the_demo_seeds_carol_her_group_and_acmes_policy_once(db, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    first = StringIO()
    call_command("harbor_demo", stdout=first)
    logins = json.loads((tmp_path / "demo-logins.json").read_text())
    assert f"carol   {logins['carol']}" in first.getvalue()
    assert "acme's approval policy: version 1 of docs/policies/acme.cedar" in first.getvalue()
    assert Membership.objects.get(user__username="carol").role == "approver"

    def state():
        group = ApproverGroup.objects.get(tenant__slug="acme", name="release-managers")
        return (
            sorted(group.members.values_list("username", flat=True)),
            list(ApprovalPolicy.objects.values_list("tenant__slug", "version", "source")),
            sorted(User.objects.values_list("username", "password")),
        )

    before = state()
    assert before[0] == ["bob", "carol"]
    assert before[1] == [("acme", 1, DEMO_POLICY.read_text())]
    call_command("harbor_demo", stdout=StringIO())
    assert state() == before
