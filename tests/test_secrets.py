"""Safe defaults: no secret from the public source, a generated local secret (0600), resume
tokens under their own rotatable keys, and DEBUG off unless asked for."""

import os
import subprocess
import sys

import pytest

from approvals.models import Pause, PauseState
from runs.application import steering_submit
from runs.domain.tokens import token_digest, token_unseal
from runs.models import RunStatus
from runs.runtime.dispatch import drain
from tests.factories import PauseFactory

CHECK = [
    sys.executable,
    "-c",
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.SECRET_KEY); print(settings.HARBOR_TOKEN_KEYS[0]); print(settings.DEBUG)",
]


def settings_in(env: dict, var_dir) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "HARBOR_TOKEN_KEYS", "HARBOR_DEBUG")
    }
    return subprocess.run(
        CHECK,
        env={**base, "DJANGO_SETTINGS_MODULE": "harbor_site.settings", "HARBOR_VAR_DIR": str(var_dir), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_embedded_default_generates_its_secrets_once_readable_by_the_owner_only(tmp_path):
    first = settings_in({}, tmp_path)
    assert first.returncode == 0, first.stderr
    secret_key, token_key, debug = first.stdout.split()
    assert "insecure" not in secret_key and len(secret_key) >= 32 and token_key != secret_key
    assert debug == "False"
    for name in ("secret-key", "token-key"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
    assert settings_in({}, tmp_path).stdout.split()[:2] == [secret_key, token_key]  # the same from then on
    assert settings_in({}, tmp_path / "elsewhere").stdout.split()[0] != secret_key  # never a shared default


def test_a_secret_file_others_can_read_is_refused(tmp_path):
    (tmp_path / "secret-key").write_text("x" * 64)
    os.chmod(tmp_path / "secret-key", 0o644)
    result = settings_in({}, tmp_path)
    assert result.returncode != 0 and "chmod 600" in result.stderr


def test_the_old_public_embedded_key_is_refused_everywhere(tmp_path):
    result = settings_in({"SECRET_KEY": "embedded-default-insecure-key-do-not-use-in-production"}, tmp_path)
    assert result.returncode != 0 and "SECRET_KEY" in result.stderr


def test_debug_is_opt_in(tmp_path):
    assert settings_in({"HARBOR_DEBUG": "1"}, tmp_path).stdout.split()[2] == "True"
    assert settings_in({"DJANGO_DEBUG": "1"}, tmp_path).stdout.split()[2] == "False"


def test_bin_run_does_not_turn_debug_on():
    run = open(os.path.join(os.path.dirname(__file__), "..", "bin", "run")).read()
    commands = [line for line in run.splitlines() if not line.lstrip().startswith("#")]
    assert not any("DEBUG" in line for line in commands)


# --- Rotation ------------------------------------------------------------------------------


@pytest.fixture
def parked(people, probe, settings):
    settings.HARBOR_TOKEN_KEYS = ["token-key-one-" + "1" * 32]
    pause = PauseFactory.create(caller=people.caller("alice"))
    return pause.run, pause, token_unseal(pause.token_sealed)


def test_rotating_secret_key_and_token_keys_leaves_an_open_pause_resumable(people, parked, settings):
    run, pause, token = parked
    assert token.startswith("hrbp_")
    settings.SECRET_KEY = "a-brand-new-secret-key-" + "2" * 32
    settings.HARBOR_TOKEN_KEYS = ["token-key-two-" + "2" * 32, "token-key-one-" + "1" * 32]
    assert token_unseal(pause.token_sealed) == token  # still shown to those allowed to see it
    assert token_digest(token) == pause.token_digest
    steering_submit(caller=people.caller("alice"), run_id=run.pk, method="approve", payload={"token": token})
    pause.refresh_from_db()
    assert pause.state == PauseState.RESUMED
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    # New pauses are minted under the new key.
    assert Pause.objects.count() == 1


def test_a_retired_token_key_no_longer_opens_its_pauses(people, parked, settings):
    from runs.kernel.errors import NotFound

    run, pause, token = parked
    settings.HARBOR_TOKEN_KEYS = ["token-key-two-" + "2" * 32]
    assert token_unseal(pause.token_sealed) is None
    with pytest.raises(NotFound):
        steering_submit(caller=people.caller("alice"), run_id=run.pk, method="approve", payload={"token": token})


def test_a_database_copy_with_the_source_recovers_no_token(people, parked, settings):
    """The database plus the public source (with any SECRET_KEY the attacker guesses) does
    not unseal: the sealing key is not derived from anything in either."""
    run, pause, token = parked
    settings.HARBOR_TOKEN_KEYS = [settings.SECRET_KEY]
    assert token_unseal(pause.token_sealed) is None


@pytest.mark.parametrize("value", ["not json", '{"issuer": "x"}'])
def test_a_malformed_issuer_list_refuses_to_start(tmp_path, value):
    result = settings_in({"HARBOR_JWT_ISSUERS": value}, tmp_path)
    assert result.returncode != 0 and "HARBOR_JWT_ISSUERS" in result.stderr
