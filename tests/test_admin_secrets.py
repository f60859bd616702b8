"""No admin page filters, searches, sorts or shows by a secret column: every registered
ModelAdmin (ours, auth's, axes's) is walked, and every secret column of every model."""

import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import models

from harbor_site.admin_site import SECRET_COLUMNS, SecretColumnsGuard
from tests.factories import SuperuserFactory

# What a secret column's name looks like: a new one must join SECRET_COLUMNS.
SECRET_LOOKING = re.compile(r"sealed|digest|secret|verifier|password|session_data|session_key")


def registered() -> list[tuple[type[models.Model], admin.ModelAdmin]]:
    return [
        (model, admin.site.get_model_admin(model)) for model in apps.get_models() if admin.site.is_registered(model)
    ]


def secret_fields(model: type[models.Model]) -> list[str]:
    return [field.name for field in model._meta.concrete_fields if field.name in SECRET_COLUMNS]


def test_every_secret_looking_column_is_declared_secret():
    undeclared = [
        f"{model._meta.label}.{field.name}"
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if SECRET_LOOKING.search(field.name) and field.name not in SECRET_COLUMNS
    ]
    assert undeclared == []


@pytest.mark.parametrize(("model", "model_admin"), registered(), ids=lambda v: getattr(v, "__name__", str(v)))
def test_no_admin_reaches_a_secret_column(rf, model, model_admin):
    assert isinstance(model_admin, SecretColumnsGuard)
    request = rf.get("/")
    named = [
        *model_admin.search_fields,
        *(
            item if isinstance(item, str) else str(item[0])
            for item in model_admin.list_filter
            if isinstance(item, str | tuple)
        ),
        *(item for item in model_admin.list_display if isinstance(item, str)),
        *(model_admin.ordering or ()),
        model_admin.date_hierarchy or "",
    ]
    assert [name for name in named if SECRET_COLUMNS.intersection(name.lstrip("-^=@").split("__"))] == []
    # Its own secret columns, and those one relation away (a user's password behind `owner`).
    probes = [f"{name}__startswith" for name in secret_fields(model)]
    for field in model._meta.get_fields():
        if field.is_relation and field.related_model is not None:
            probes += [f"{field.name}__{name}__startswith" for name in secret_fields(field.related_model)]
    probes += ["payload___sign_in__startswith", "payload__sealed__startswith"]
    assert [probe for probe in probes if model_admin.lookup_allowed(probe, "a", request)] == []


@pytest.mark.parametrize(
    "probe",
    [
        "/admin/approvals/oauthflow/?state_digest__startswith=0",
        "/admin/approvals/oauthflow/?verifier_sealed__startswith=g",
        "/admin/approvals/oauthsource/?client_secret_sealed__startswith=g",
        "/admin/approvals/oauthcredential/?sealed__startswith=g",
        "/admin/approvals/remoteagent/?auth_sealed__startswith=g",
        "/admin/auth/user/?password__startswith=md5",
        "/admin/runs/run/?owner__password__startswith=md5",
        "/admin/approvals/pause/?decided_by__password__startswith=md5",
        "/admin/approvals/pause/?payload___sign_in__startswith=g",
        "/admin/approvals/pause/?token_digest__startswith=0",
    ],
)
def test_a_changelist_refuses_a_lookup_on_a_secret_column(db, client, probe):
    client.force_login(SuperuserFactory.create(username="root"))
    assert client.get(probe).status_code == 400
