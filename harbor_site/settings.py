"""One settings module, driven by the environment.

No DATABASE_URL / REDIS_URL: the embedded default (SQLite in WAL mode, in-memory channel
layer, runs advanced by threads inside the web process). With them: production
(PostgreSQL, channels_redis, Celery workers on a Redis broker).
"""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("HARBOR_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not (DATABASE_URL or REDIS_URL)
if bool(DATABASE_URL) != bool(REDIS_URL):
    raise ImproperlyConfigured("Set both DATABASE_URL and REDIS_URL (production) or neither (embedded).")

DEBUG = os.environ.get("DJANGO_DEBUG", "1" if EMBEDDED else "0") == "1"

_INSECURE_KEY = "embedded-default-insecure-key-do-not-use-in-production"
SECRET_KEY = os.environ.get("SECRET_KEY", _INSECURE_KEY if EMBEDDED else "")
if not EMBEDDED and (len(SECRET_KEY) < 32 or SECRET_KEY == _INSECURE_KEY):
    raise ImproperlyConfigured("Production needs a real SECRET_KEY (32+ characters) in the environment.")

ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from our own static files, no CDN
    "channels",
    "guardian",
    "runs",
    "approvals",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "harbor_site.urls"
ASGI_APPLICATION = "harbor_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

if EMBEDDED:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("HARBOR_SQLITE_PATH", str(VAR_DIR / "harbor.sqlite3")),
            # A file test database, so a second process (a worker) can see it; one per
            # test session, inherited by the processes that session starts.
            "TEST": {"NAME": os.environ.setdefault("HARBOR_TEST_DB", str(VAR_DIR / f"test-{os.getpid()}.sqlite3"))},
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
else:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
ANONYMOUS_USER_NAME = None  # guardian: no anonymous user row

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("HARBOR_STATIC_ROOT", BASE_DIR / "staticfiles"))
# Static files are served by the project itself (no CDN): straight from the source folders
# on the embedded default, from `collectstatic` output in production.
WHITENOISE_USE_FINDERS = EMBEDDED

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Production is served over HTTPS behind a proxy; HARBOR_HTTPS=0 only for local checks.
HTTPS = os.environ.get("HARBOR_HTTPS", "0" if EMBEDDED else "1") == "1"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # /v1/ speaks bearer JWTs only (runs.auth); one handler maps every error to PROTOCOL §7.
    "DEFAULT_AUTHENTICATION_CLASSES": ["runs.auth.BearerAuthentication"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "runs.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Harbor Protocol",
    "DESCRIPTION": "Harbor Protocol 0.1.0 over HTTP: task control, the nine steering methods, pauses and "
                   "resume tokens, tasks, and the event stream (GET /v1/events, Server-Sent Events). "
                   "Errors are {code, message}. Strings may not contain NUL (U+0000). A walkthrough: docs/protocol-walkthrough.md.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": ["pending", "running", "paused", "complete", "failed", "cancelled"],
        "PauseStateEnum": ["paused", "resumed"],
        "PauseStatusFilterEnum": ["paused", "resumed", "any"],
        "ReasonEnum": ["approval_required", "external_event", "await_input"],
        "CauseEnum": ["hitl_approval", "tool_oauth", "a2a", "operator"],
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "runs.api.document_protocol",
    ],
}

# --- API identity (runs.auth) -------------------------------------------------------------
# Public keys trusted for bearer JWTs: PEM text, or comma-separated paths to PEM files.
HARBOR_JWT_PUBLIC_KEYS = os.environ.get("HARBOR_JWT_PUBLIC_KEYS", "")
# The embedded default also trusts its development key pair (var/jwt-dev-key.pem), which
# `manage.py harbor_token` signs with. Production never does.
HARBOR_JWT_DEV_KEYS = EMBEDDED and os.environ.get("HARBOR_JWT_DEV_KEYS", "1") == "1"
# Refused decisions (token guessing) before 429 rate_limited, per identity and per address.
HARBOR_REFUSAL_WINDOW_SECONDS = int(os.environ.get("HARBOR_REFUSAL_WINDOW_SECONDS", "900"))
HARBOR_REFUSALS_PER_IDENTITY = int(os.environ.get("HARBOR_REFUSALS_PER_IDENTITY", "10"))
HARBOR_REFUSALS_PER_ADDRESS = int(os.environ.get("HARBOR_REFUSALS_PER_ADDRESS", "30"))
# The SSE stream's keepalive comment interval.
HARBOR_SSE_KEEPALIVE_SECONDS = float(os.environ.get("HARBOR_SSE_KEEPALIVE_SECONDS", "15"))
# A quiet websocket re-reads the log (and re-checks the membership) this often; while the
# channel layer fails, every live stream polls the log at the shorter interval.
HARBOR_WS_RECHECK_SECONDS = float(os.environ.get("HARBOR_WS_RECHECK_SECONDS", "10"))
HARBOR_STREAM_POLL_SECONDS = float(os.environ.get("HARBOR_STREAM_POLL_SECONDS", "1"))

# --- Runtime -----------------------------------------------------------------------------
# "thread": advance runs on threads in this process (embedded); "celery": enqueue Celery
# tasks (production); "manual": nothing runs until a caller drives the runtime (tests).
HARBOR_EXECUTOR = os.environ.get("HARBOR_EXECUTOR", "thread" if EMBEDDED else "celery")
HARBOR_LOCAL_WORKERS = int(os.environ.get("HARBOR_LOCAL_WORKERS", "4"))
HARBOR_LEASE_SECONDS = int(os.environ.get("HARBOR_LEASE_SECONDS", "30"))
HARBOR_SWEEP_SECONDS = float(os.environ.get("HARBOR_SWEEP_SECONDS", "2"))
HARBOR_TICK_SECONDS = float(os.environ.get("HARBOR_TICK_SECONDS", "0.5"))

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE = {
    "sweep": {"task": "runs.tasks.sweep", "schedule": timedelta(seconds=HARBOR_SWEEP_SECONDS)},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"harbor": {"handlers": ["console"], "level": os.environ.get("HARBOR_LOG_LEVEL", "INFO")}},
}
