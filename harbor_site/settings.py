"""One settings module, driven by the environment.

No DATABASE_URL / REDIS_URL: the embedded default (SQLite in WAL mode, in-memory channel
layer, runs advanced by threads inside the web process). With them: production
(PostgreSQL, channels_redis, Celery workers on a Redis broker).
"""

import json
import os
import secrets
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from runs.kernel.owner_files import write_once

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("HARBOR_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not (DATABASE_URL or REDIS_URL)
if bool(DATABASE_URL) != bool(REDIS_URL):
    raise ImproperlyConfigured("Set both DATABASE_URL and REDIS_URL (production) or neither (embedded).")

# Off unless asked for, on every topology: a debug page shows settings and source.
DEBUG = os.environ.get("HARBOR_DEBUG", "0") == "1"


def _local_secret(name: str) -> str:
    """A random secret kept in VAR_DIR/<name> (git-ignored, owner-only), made on first run."""
    path = VAR_DIR / name
    write_once(path, secrets.token_urlsafe(48).encode())
    if path.stat().st_mode & 0o077:
        raise ImproperlyConfigured(f"{path} must be readable by its owner only (chmod 600)")
    return path.read_text().strip()


# The source once shipped a fixed embedded key; a copy of the source must never sign anything.
_PUBLIC_KEYS = {"embedded-default-insecure-key-do-not-use-in-production"}
SECRET_KEY = os.environ.get("SECRET_KEY", "") or (_local_secret("secret-key") if EMBEDDED else "")
if len(SECRET_KEY) < 32 or SECRET_KEY in _PUBLIC_KEYS:
    raise ImproperlyConfigured("Production needs a real SECRET_KEY (32+ characters) in the environment.")

# Keys of resume tokens (runs.domain.tokens), newest first, comma-separated: their own list, so
# SECRET_KEY rotates without stranding open pauses. Rotate by prepending a new key and
# dropping the old one once no pause sealed with it is open. Unset: a generated local key
# on the embedded default; SECRET_KEY in production (add the old SECRET_KEY here before
# rotating it).
HARBOR_TOKEN_KEYS = [k.strip() for k in os.environ.get("HARBOR_TOKEN_KEYS", "").split(",") if k.strip()] or [
    _local_secret("token-key") if EMBEDDED else SECRET_KEY
]

ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "daphne",
    "harbor_site.admin_apps.HarborAdminConfig",  # django.contrib.admin, its site guarding secret columns
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
    "axes",
    "csp",
    "runs",
    "approvals",
    "approvals.oauth",  # a pause cause as a plug-in: tool-side OAuth sign-ins
    "approvals.a2a",  # a pause cause as a plug-in: remote A2A agents
    "outbox",
    "notifications",  # a pause told on the channels a deployment turns on (none yet)
]

MIDDLEWARE = [
    "runs.protocol.middleware.ProtocolGuardMiddleware",  # first: client address, Host and body size for /v1/
    "django.middleware.security.SecurityMiddleware",
    "runs.web.bidi.BidiControlsShown",  # after every other's response: the page as sent
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
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

DATABASES: dict[str, dict[str, Any]]
CHANNEL_LAYERS: dict[str, dict[str, object]]
HARBOR_LIVE_REDIS_URL: str | None = None  # live pushes over Redis pub/sub, when set
CHANNEL_GROUP_EXPIRY_SECONDS = 120
if EMBEDDED:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("HARBOR_SQLITE_PATH", str(VAR_DIR / "harbor.sqlite3")),
            # A file test database, so a second process (a worker) can see it; one per
            # test session, inherited by the processes that session starts.
            "TEST": {"NAME": os.environ.setdefault("HARBOR_TEST_DB", str(VAR_DIR / f"test-{os.getpid()}.sqlite3"))},
            # Kept open by the threads that use it (requests' threads are a fixed set,
            # harbor_site.request_threads): opening one costs more than a request's queries.
            "CONN_MAX_AGE": 600,
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                # Checkpoints run on a thread of the server (harbor_site.sqlite_wal), not in
                # the commit that crosses 1,000 pages; past 10,000 a commit still runs one.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=10000;",
            },
        }
    }
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
else:
    # A connection pool per process (psycopg's), not persistent connections: under ASGI each
    # request runs on a thread of its own, and CONN_MAX_AGE would leave one idle connection
    # behind per thread. The pool bounds what one process holds.
    # Checked as the pool hands it out (psycopg_pool's own check, one empty query): a
    # connection the server dropped meanwhile (its restart, a failover, an idle timeout on the
    # way) is replaced, not handed to a request or a step. Django gives the pool that check
    # when CONN_HEALTH_CHECKS is on, and refuses a "check" of the pool options beside its own.
    DATABASES = {"default": dict(dj_database_url.parse(DATABASE_URL, conn_max_age=0, conn_health_checks=True))}
    DATABASES["default"]["ENGINE"] = "django.db.backends.postgresql"
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": int(os.environ.get("HARBOR_DB_POOL_MIN", "1")),
        "max_size": int(os.environ.get("HARBOR_DB_POOL_MAX", "20")),
        "timeout": float(os.environ.get("HARBOR_DB_POOL_TIMEOUT", "10")),
    }
    # The live streams listen on Redis pub/sub (runs.domain.pubsub): a commit's push is one
    # PUBLISH, and a process that dies leaves no membership behind.
    HARBOR_LIVE_REDIS_URL = REDIS_URL
    # Channels' own layer. A Hub on it re-joins its groups every 30 s, so the memberships of a
    # process that died go after two minutes rather than channels_redis's default day.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "group_expiry": CHANNEL_GROUP_EXPIRY_SECONDS},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out sign-in before any password check
    "runs.identity.callers.LoginBackend",
    "guardian.backends.ObjectPermissionBackend",
]
# Sign-in lockout (django-axes): 5 failures for one account from one address lock that pair
# for 15 minutes. The address is REMOTE_ADDR (no forwarded headers, which a client can forge);
# lockouts are listed, and can be lifted, in the admin (Axes › Access attempts).
AXES_FAILURE_LIMIT = int(os.environ.get("HARBOR_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=int(os.environ.get("HARBOR_LOGIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_USERNAME_CALLABLE = "runs.identity.callers.login_username"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
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
if EMBEDDED:  # no `collectstatic` output is expected there: WhiteNoise need not say so at each start
    warnings.filterwarnings("ignore", message=r"No directory at: .*staticfiles", category=UserWarning)

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Production is served over HTTPS behind a proxy; HARBOR_HTTPS=0 only for local checks.
HTTPS = os.environ.get("HARBOR_HTTPS", "0" if EMBEDDED else "1") == "1"
# Sessions live in the database keyed by a digest of their key (runs.identity.sessions): a copy of
# the database holds no usable login.
SESSION_ENGINE = "runs.identity.sessions"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
if HTTPS:
    # The browser keeps a __Host- cookie only when this host set it over HTTPS, for the whole
    # site and no other domain: a sibling subdomain or a plain-HTTP page cannot plant a second
    # session or CSRF cookie beside ours (of two cookies of one name, Django reads the last).
    SESSION_COOKIE_NAME, CSRF_COOKIE_NAME = "__Host-sessionid", "__Host-csrftoken"
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(os.environ.get("HARBOR_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = os.environ.get("HARBOR_HSTS_INCLUDE_SUBDOMAINS", "0") == "1"

# Security headers. The pages load scripts and styles only from our own static files (no
# inline script or style), so the policy needs no 'unsafe-inline'; websockets are same-origin.
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CONTENT_TYPE_NOSNIFF = True
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],  # CSP3: 'self' covers same-origin ws:/wss:
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
        **({"upgrade-insecure-requests": True} if HTTPS else {}),
    },
}

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # /v1/ speaks bearer JWTs only (runs.protocol.auth); one handler maps every error to PROTOCOL §7.
    "DEFAULT_AUTHENTICATION_CLASSES": ["runs.protocol.auth.BearerAuthentication"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "runs.protocol.errors.exception_handler",
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
        "runs.protocol.schema.document_protocol",
    ],
}

# --- API identity (runs.protocol.auth) -------------------------------------------------------------
# Trusted issuers, as JSON: [{"issuer": "https://idp.acme.example", "tenants": ["acme"],
#   "keys": "/etc/harbor/acme.pem" | "-----BEGIN…", "jwks_url": "https://…/jwks.json",
#   "audience": "harbor" (optional), "namespace": "acme-idp" (optional: "" = this server's
#   own accounts; default the issuer's host name, so equal names of two issuers stay apart)}]
try:
    HARBOR_JWT_ISSUERS = json.loads(os.environ.get("HARBOR_JWT_ISSUERS", "") or "[]")
except ValueError as error:
    raise ImproperlyConfigured(f"HARBOR_JWT_ISSUERS is not valid JSON: {error}") from None
if not isinstance(HARBOR_JWT_ISSUERS, list):
    raise ImproperlyConfigured("HARBOR_JWT_ISSUERS must be a JSON list of issuers")
# The single-issuer shorthand: public keys (PEM text, or comma-separated paths to PEM files)
# of one identity provider whose users are this server's own accounts, its `iss`, and the
# tenants it may speak for ("*": all of them — one organisation).
HARBOR_JWT_PUBLIC_KEYS = os.environ.get("HARBOR_JWT_PUBLIC_KEYS", "")
HARBOR_JWT_ISSUER = os.environ.get("HARBOR_JWT_ISSUER", "harbor")
HARBOR_JWT_TENANTS = os.environ.get("HARBOR_JWT_TENANTS", "*")
# The `aud` every token must carry (an issuer may override it).
HARBOR_JWT_AUDIENCE = os.environ.get("HARBOR_JWT_AUDIENCE", "harbor")
# Tokens whose exp lies further ahead than this are refused.
HARBOR_JWT_MAX_TTL_SECONDS = int(os.environ.get("HARBOR_JWT_MAX_TTL_SECONDS", str(7 * 24 * 3600)))
# The embedded default also trusts its development key pair (var/jwt-dev-key.pem, issuer
# `harbor-dev`), which `manage.py harbor_token` signs with. Production never does.
HARBOR_JWT_DEV_KEYS = EMBEDDED and os.environ.get("HARBOR_JWT_DEV_KEYS", "1") == "1"
# A token for a tenant this server does not know is refused, unless this is on (then the
# tenant is created, if the token's issuer may speak for it).
HARBOR_AUTO_PROVISION_TENANTS = os.environ.get("HARBOR_AUTO_PROVISION_TENANTS", "0") == "1"
# Refused decisions (token guessing) before 429 rate_limited, per identity and per address.
HARBOR_REFUSAL_WINDOW_SECONDS = int(os.environ.get("HARBOR_REFUSAL_WINDOW_SECONDS", "900"))
HARBOR_REFUSALS_PER_IDENTITY = int(os.environ.get("HARBOR_REFUSALS_PER_IDENTITY", "10"))
HARBOR_REFUSALS_PER_ADDRESS = int(os.environ.get("HARBOR_REFUSALS_PER_ADDRESS", "100"))
# The SSE stream's keepalive comment interval.
HARBOR_SSE_KEEPALIVE_SECONDS = float(os.environ.get("HARBOR_SSE_KEEPALIVE_SECONDS", "15"))
# A quiet websocket re-reads the log (and re-checks the membership) this often; while the
# channel layer fails, every live stream polls the log at the shorter interval.
HARBOR_WS_RECHECK_SECONDS = float(os.environ.get("HARBOR_WS_RECHECK_SECONDS", "10"))
# Websockets one person may hold open on one server process (a page needs one); past it a
# socket is closed with 4429 and its page retries later.
HARBOR_WS_MAX_PER_USER = int(os.environ.get("HARBOR_WS_MAX_PER_USER", "50"))
HARBOR_STREAM_POLL_SECONDS = float(os.environ.get("HARBOR_STREAM_POLL_SECONDS", "1"))

# --- Abuse limits (runs.protocol.middleware, runs.protocol) ------------------------------------------------
# Proxies whose X-Forwarded-For is believed, as comma-separated addresses or CIDRs (for
# example "10.0.0.0/8,127.0.0.1"). The client address is the first hop, read from the right,
# that is not one of them; with none configured it is the socket's peer. Keep Daphne's
# --proxy-headers off: it takes the header's leftmost entry, which the client writes.
HARBOR_TRUSTED_PROXIES = [p for p in os.environ.get("HARBOR_TRUSTED_PROXIES", "").split(",") if p.strip()]

# --- Runtime -----------------------------------------------------------------------------
# "thread": advance runs on threads in this process (embedded); "celery": enqueue Celery
# tasks (production); "manual": nothing runs until a caller drives the runtime (tests).
HARBOR_EXECUTOR = os.environ.get("HARBOR_EXECUTOR", "thread" if EMBEDDED else "celery")
# Threads that run requests' sync code, borrowed one per request (harbor_site.request_threads).
HARBOR_REQUEST_THREADS = int(os.environ.get("HARBOR_REQUEST_THREADS", "20"))
HARBOR_LOCAL_WORKERS = int(os.environ.get("HARBOR_LOCAL_WORKERS", "4"))
# A worker's lease on a run; a heartbeat renews it every third while a planner or tool works.
HARBOR_LEASE_SECONDS = float(os.environ.get("HARBOR_LEASE_SECONDS", "30"))
# Steps of one tenant's runs in flight at once: the rest of the workers stay free for other tenants.
HARBOR_TENANT_MAX_RUNNING = int(os.environ.get("HARBOR_TENANT_MAX_RUNNING", max(1, HARBOR_LOCAL_WORKERS - 1)))
HARBOR_SWEEP_SECONDS = float(os.environ.get("HARBOR_SWEEP_SECONDS", "2"))
HARBOR_TICK_SECONDS = float(os.environ.get("HARBOR_TICK_SECONDS", "0.5"))

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes a prefork child's whole connection pool before and after
# every task unless this is set, so each wake-up would pay a new PostgreSQL connection.
# With it, a child keeps its pool; runs.tasks hands the task's connection back to it.
CELERY_DB_REUSE_MAX = 10**9

# --- Outbox (outbox/) --------------------------------------------------------------------
# Side effects owed after a commit (a remote task's cancel) are delivered after it; a failed
# attempt is due again after a backoff doubling from HARBOR_OUTBOX_BACKOFF_SECONDS, capped at
# HARBOR_OUTBOX_BACKOFF_MAX_SECONDS; after HARBOR_OUTBOX_MAX_ATTEMPTS attempts (about eight
# minutes with the defaults) the message is dead, listed and redeliverable in the admin.
HARBOR_OUTBOX_MAX_ATTEMPTS = int(os.environ.get("HARBOR_OUTBOX_MAX_ATTEMPTS", "10"))
HARBOR_OUTBOX_BACKOFF_SECONDS = float(os.environ.get("HARBOR_OUTBOX_BACKOFF_SECONDS", "1"))
HARBOR_OUTBOX_BACKOFF_MAX_SECONDS = float(os.environ.get("HARBOR_OUTBOX_BACKOFF_MAX_SECONDS", "300"))
# How long a claimed message is left to its deliverer before another may take it (longer
# than a handler takes: a remote call's timeouts).
HARBOR_OUTBOX_LEASE_SECONDS = float(os.environ.get("HARBOR_OUTBOX_LEASE_SECONDS", "120"))
# Production: the beat's drain, which delivers retries as they fall due.
HARBOR_OUTBOX_DRAIN_SECONDS = float(os.environ.get("HARBOR_OUTBOX_DRAIN_SECONDS", "5"))

# --- Remote A2A agents (approvals/a2a/) -------------------------------------------------
# A remote agent is someone else's server: everything that comes from it is bounded.
# Every call to it (its card, a send and the stream it answers with, a look, a list, a
# cancel) connects within HARBOR_A2A_CONNECT_SECONDS and ends within HARBOR_A2A_CALL_SECONDS
# in all, however slowly the agent answers, and reads at most HARBOR_A2A_MAX_RESPONSE_BYTES.
HARBOR_A2A_CONNECT_SECONDS = float(os.environ.get("HARBOR_A2A_CONNECT_SECONDS", "5"))
HARBOR_A2A_CALL_SECONDS = float(os.environ.get("HARBOR_A2A_CALL_SECONDS", "60"))
HARBOR_A2A_MAX_RESPONSE_BYTES = int(os.environ.get("HARBOR_A2A_MAX_RESPONSE_BYTES", str(4 * 1024 * 1024)))
# What is kept of an agent's question, message or artifact (shown to a person, stored as an
# answer): the first HARBOR_A2A_MAX_TEXT_BYTES, with a note saying how much was cut.
HARBOR_A2A_MAX_TEXT_BYTES = int(os.environ.get("HARBOR_A2A_MAX_TEXT_BYTES", str(64 * 1024)))
# Remote calls in flight at once, across every worker: per tenant, and per agent host. A step
# that finds no free slot gives its worker back and is taken again later (docs/adr/0004).
HARBOR_A2A_MAX_CALLS_PER_TENANT = int(os.environ.get("HARBOR_A2A_MAX_CALLS_PER_TENANT", "2"))
HARBOR_A2A_MAX_CALLS_PER_PEER = int(os.environ.get("HARBOR_A2A_MAX_CALLS_PER_PEER", "4"))
# Hosts (host or host:port) an agent card may send its JSON-RPC calls to beyond the card's
# own origin. The agent's Authorization header goes to the card's origin only, never there.
HARBOR_A2A_ALLOWED_HOSTS = [h.strip() for h in os.environ.get("HARBOR_A2A_ALLOWED_HOSTS", "").split(",") if h.strip()]

CELERY_BEAT_SCHEDULE = {
    "sweep": {"task": "runs.tasks.sweep", "schedule": timedelta(seconds=HARBOR_SWEEP_SECONDS)},
    "outbox": {"task": "outbox.tasks.deliver", "schedule": timedelta(seconds=HARBOR_OUTBOX_DRAIN_SECONDS)},
}

# --- Tool-side OAuth (approvals.oauth) -------------------------------------------------------
# Keys sealing OAuth credentials, client secrets and PKCE verifiers, newest first, their own
# list (rotate like HARBOR_TOKEN_KEYS: prepend, re-seal, drop the old). Unset: a generated
# local key on the embedded default; SECRET_KEY in production.
HARBOR_CREDENTIAL_KEYS = [k.strip() for k in os.environ.get("HARBOR_CREDENTIAL_KEYS", "").split(",") if k.strip()] or [
    _local_secret("credential-key") if EMBEDDED else SECRET_KEY
]
# How long a sign-in (the `state` of a tool_oauth pause) may take, in seconds.
HARBOR_OAUTH_FLOW_TTL = int(os.environ.get("HARBOR_OAUTH_FLOW_TTL", "600"))
# Where providers send people back: this server's public address of the callback.
HARBOR_OAUTH_REDIRECT_URI = os.environ.get(
    "HARBOR_OAUTH_REDIRECT_URI", f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/v1/tools/oauth/callback"
)
# Sources configured from the environment, as JSON (see approvals.oauth.sources); an admin's
# row in the Django admin wins over an entry here.
try:
    HARBOR_OAUTH_SOURCES = json.loads(os.environ.get("HARBOR_OAUTH_SOURCES", "") or "[]")
except ValueError as error:
    raise ImproperlyConfigured(f"HARBOR_OAUTH_SOURCES is not valid JSON: {error}") from None

# --- Web and live streams bounds --------------------------------------------------------------
# SSE streams one person may hold open on one server process, as websockets
# (HARBOR_WS_MAX_PER_USER); past it a stream is refused with 429 rate_limited.
HARBOR_SSE_MAX_PER_USER = int(os.environ.get("HARBOR_SSE_MAX_PER_USER", str(HARBOR_WS_MAX_PER_USER)))
# The largest websocket frame the pages are sent, in bytes: below the 1 MiB a websocket peer
# takes (Daphne's own default, common clients'); a larger event's big fields are cut.
HARBOR_WS_MAX_FRAME_BYTES = int(os.environ.get("HARBOR_WS_MAX_FRAME_BYTES", str(512 * 1024)))
# Seconds a connection has to deliver a whole request (line, headers and body) from when it
# opens or its last response ends; past that the server hangs up (compat.twisted).
HARBOR_HTTP_REQUEST_SECONDS = float(os.environ.get("HARBOR_HTTP_REQUEST_SECONDS", "30"))

# --- OAuth providers (approvals.oauth) ------------------------------------------------------
# A provider is someone else's server. Every call to it (code exchange, refresh, revocation, API)
# ends within HARBOR_OAUTH_CALL_SECONDS in all (connect and the whole answer, however slowly
# it comes) and reads at most HARBOR_OAUTH_MAX_RESPONSE_BYTES; the tokens and scope it gives
# are refused beyond their limits (the scope's is its column's width).
HARBOR_OAUTH_CALL_SECONDS = float(os.environ.get("HARBOR_OAUTH_CALL_SECONDS", "10"))
HARBOR_OAUTH_MAX_RESPONSE_BYTES = int(os.environ.get("HARBOR_OAUTH_MAX_RESPONSE_BYTES", str(64 * 1024)))
HARBOR_OAUTH_MAX_TOKEN_CHARS = int(os.environ.get("HARBOR_OAUTH_MAX_TOKEN_CHARS", str(16 * 1024)))
HARBOR_OAUTH_MAX_SCOPE_CHARS = min(int(os.environ.get("HARBOR_OAUTH_MAX_SCOPE_CHARS", "500")), 500)
# Provider calls one process makes at once, in all and per provider. A callback trades its
# code in a request thread, so at most half of HARBOR_REQUEST_THREADS may ever wait on
# providers; a call beyond the bound fails at once ("try again in a moment").
HARBOR_OAUTH_CALLS_AT_ONCE = min(
    int(os.environ.get("HARBOR_OAUTH_CALLS_AT_ONCE", str(max(1, HARBOR_REQUEST_THREADS // 5)))),
    max(1, HARBOR_REQUEST_THREADS // 2),
)
HARBOR_OAUTH_CALLS_PER_PROVIDER = int(os.environ.get("HARBOR_OAUTH_CALLS_PER_PROVIDER", "2"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"harbor": {"handlers": ["console"], "level": os.environ.get("HARBOR_LOG_LEVEL", "INFO")}},
}
