"""OAuth secrets at rest, without a provider: sealing under a rotatable key list, flow
states kept only as digests, sources from the admin (the secret never shown back) or the
environment."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from approvals.oauth import sealing
from approvals.oauth.models import OAuthSource
from approvals.oauth.sources import SourceMissing, source_get, source_save
from tests.conftest import People
from tests.oauth.sources import SOURCE


def test_sealed_values_survive_a_key_rotation_and_nothing_opens_them_without_a_key(settings) -> None:
    settings.HARBOR_CREDENTIAL_KEYS = ["old-key-0123456789abcdef0123456789"]
    sealed = sealing.seal({"access_token": "at-123"})
    old_digest = sealing.digests("hrbs_state")[0]
    assert "at-123" not in sealed

    settings.HARBOR_CREDENTIAL_KEYS = ["new-key-0123456789abcdef0123456789", "old-key-0123456789abcdef0123456789"]
    assert sealing.unseal(sealed) == {"access_token": "at-123"}
    assert sealing.digests("hrbs_state")[1] == old_digest  # open flows are still found
    resealed = sealing.reseal(sealed)

    settings.HARBOR_CREDENTIAL_KEYS = ["new-key-0123456789abcdef0123456789"]
    assert sealing.unseal(resealed) == {"access_token": "at-123"}
    with pytest.raises(sealing.Unsealable):
        sealing.unseal(sealed)  # the retired key's copy
    settings.HARBOR_CREDENTIAL_KEYS = ["someone-elses-key-0123456789abcdef"]
    with pytest.raises(sealing.Unsealable):
        sealing.unseal(resealed)


def test_a_saved_source_keeps_its_secret_sealed_and_reads_it_back(people: People) -> None:
    row = source_save(people.acme, SOURCE)
    assert SOURCE.client_secret not in row.client_secret_sealed
    assert source_get(people.acme, "calendar") == SOURCE
    with pytest.raises(SourceMissing):
        source_get(people.globex, "calendar")  # sources are per tenant


def test_a_source_from_the_environment_and_a_row_that_overrides_it(people: People, settings) -> None:
    settings.HARBOR_OAUTH_SOURCES = [
        {
            "tenant": "globex",
            "name": "calendar",
            "display_name": "Env Calendar",
            "client_id": "env-client",
            "client_secret": "env-secret",
            "authorize_url": "https://idp.example/authorize",
            "token_url": "https://idp.example/token",
            "scopes": "calendar.read calendar.write",
        }
    ]
    from_env = source_get(people.globex, "calendar")
    assert (from_env.display_name, from_env.client_secret, from_env.scopes) == (
        "Env Calendar",
        "env-secret",
        ("calendar.read", "calendar.write"),
    )
    source_save(people.globex, SOURCE)
    assert source_get(people.globex, "calendar").display_name == "Demo Calendar"


def test_the_admin_seals_a_new_client_secret_and_never_shows_it_back(people: People) -> None:
    admin = get_user_model().objects.create_superuser("root", password="root-password")
    client = Client()
    client.force_login(admin)
    form = {
        "tenant": people.acme.pk,
        "name": "calendar",
        "display_name": "Demo Calendar",
        "client_id": "harbor-demo",
        "client_secret": "typed-in-secret",
        "authorize_url": "https://idp.example/authorize",
        "token_url": "https://idp.example/token",
        "revoke_url": "",
        "api_base_url": "https://idp.example",
        "scopes": "calendar.read",
    }
    assert client.post("/admin/approvals/oauthsource/add/", form).status_code == 302
    row = OAuthSource.objects.get(tenant=people.acme, name="calendar")
    assert "typed-in-secret" not in row.client_secret_sealed
    assert source_get(people.acme, "calendar").client_secret == "typed-in-secret"

    page = client.get(f"/admin/approvals/oauthsource/{row.pk}/change/").content.decode()
    assert "typed-in-secret" not in page and row.client_secret_sealed not in page
    # Saved again with the secret left empty: the stored one is kept.
    assert (
        client.post(f"/admin/approvals/oauthsource/{row.pk}/change/", {**form, "client_secret": ""}).status_code == 302
    )
    assert source_get(people.acme, "calendar").client_secret == "typed-in-secret"
    assert client.get("/admin/approvals/oauthcredential/").status_code == 200
    assert client.get("/admin/approvals/oauthflow/add/").status_code == 403


def test_the_demo_provider_is_no_part_of_the_app(settings) -> None:
    """It runs in a process of its own; the app only ever calls it over HTTP."""
    assert not any(app.startswith(("oauth2_provider", "approvals.oauth.provider")) for app in settings.INSTALLED_APPS)
