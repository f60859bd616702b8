"""One settings module driven by the environment; production refuses an unsafe start."""

import os
import subprocess
import sys

import pytest

CHECK = [
    sys.executable,
    "-c",
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.DATABASES['default']['ENGINE'], settings.CHANNEL_LAYERS['default']['BACKEND'], "
    "settings.HARBOR_EXECUTOR)",
]


def settings_in(env: dict) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")}
    return subprocess.run(
        CHECK,
        env={**base, "DJANGO_SETTINGS_MODULE": "harbor_site.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_service_urls_is_the_embedded_default():
    result = settings_in({})
    assert result.stdout.split() == ["django.db.backends.sqlite3", "channels.layers.InMemoryChannelLayer", "thread"]


PRODUCTION = {"DATABASE_URL": "postgres://u@127.0.0.1:5432/harbor", "REDIS_URL": "redis://127.0.0.1:6379/0"}


def test_service_urls_mean_production():
    result = settings_in({**PRODUCTION, "SECRET_KEY": "x" * 50})
    assert result.stdout.split() == ["django.db.backends.postgresql", "channels_redis.core.RedisChannelLayer", "celery"]


@pytest.mark.parametrize("secret", [None, "short", "embedded-default-insecure-key-do-not-use-in-production"])
def test_production_refuses_to_start_without_a_real_secret_key(secret):
    env = dict(PRODUCTION, **({"SECRET_KEY": secret} if secret else {}))
    result = settings_in(env)
    assert result.returncode != 0 and "SECRET_KEY" in result.stderr


def test_half_a_production_configuration_is_refused():
    result = settings_in({"DATABASE_URL": PRODUCTION["DATABASE_URL"], "SECRET_KEY": "x" * 50})
    assert result.returncode != 0 and "REDIS_URL" in result.stderr
