"""Settings of the demo authorization server: a project of its own, with its own secret
key, users and SQLite database under var/ (HARBOR_OAUTH_PROVIDER_VAR_DIR, else
HARBOR_VAR_DIR, else var/). Never part of the app's INSTALLED_APPS."""

import os
import secrets
from pathlib import Path

from runs.kernel.owner_files import write_once

BASE_DIR = Path(__file__).resolve().parent
REPO_DIR = BASE_DIR.parent.parent.parent
VAR_DIR = Path(os.environ.get("HARBOR_OAUTH_PROVIDER_VAR_DIR") or os.environ.get("HARBOR_VAR_DIR") or REPO_DIR / "var")
VAR_DIR.mkdir(parents=True, exist_ok=True)

_key_path = VAR_DIR / "oauth-provider-secret-key"
write_once(_key_path, secrets.token_urlsafe(48).encode())
SECRET_KEY = _key_path.read_text().strip()
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oauth2_provider",
    "approvals.oauth.provider",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "approvals.oauth.provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],  # ahead of oauth2_provider's own, so its pages are ours
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("HARBOR_OAUTH_PROVIDER_DB", str(VAR_DIR / "oauth-provider.sqlite3")),
        # IMMEDIATE: concurrent token requests wait for the write lock (busy timeout), rather
        # than fail "database is locked" upgrading a read to a write.
        "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;", "transaction_mode": "IMMEDIATE"},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
# Its own cookie name: on 127.0.0.1 cookies are shared across ports, and the app's session
# cookie must not be overwritten by the provider's.
SESSION_COOKIE_NAME = "provider_sessionid"
CSRF_COOKIE_NAME = "provider_csrftoken"
LOGIN_URL = "/accounts/login/"

OAUTH2_PROVIDER = {
    "PKCE_REQUIRED": True,  # every authorization request carries a code challenge (the app sends S256)
    "SCOPES": {"calendar.read": "Read your calendar events"},
    "DEFAULT_SCOPES": ["calendar.read"],
    "ACCESS_TOKEN_EXPIRE_SECONDS": int(os.environ.get("HARBOR_OAUTH_PROVIDER_TOKEN_SECONDS", "3600")),
    "ROTATE_REFRESH_TOKEN": True,
    "REQUEST_APPROVAL_PROMPT": "force",  # a consent page every time: the demo shows it
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
