"""One settings module, driven by the environment (harbor_site.settings.environment).

Here: Django's own settings, the secrets and the pages' security. The sections beside it:
`live` (the database, the channel layer and Celery, which the topology picks) and `bounds`
(Harbor's own HARBOR_* settings: whom the API trusts, how runs are advanced, and the bounds
on what a caller, a worker or a remote server may take).
"""

import os
import secrets
import warnings
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# The sections, each read by Django as if written here.
from harbor_site.settings.bounds import *  # noqa: F403
from harbor_site.settings.environment import *  # noqa: F403
from harbor_site.settings.environment import BASE_DIR, EMBEDDED, VAR_DIR
from harbor_site.settings.live import *  # noqa: F403
from runs.kernel.owner_files import write_once

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
# Keys sealing tool-side OAuth credentials, client secrets and PKCE verifiers (approvals.oauth),
# newest first, their own list (rotate like HARBOR_TOKEN_KEYS: prepend, re-seal, drop the
# old). Unset: a generated local key on the embedded default; SECRET_KEY in production.
HARBOR_CREDENTIAL_KEYS = [k.strip() for k in os.environ.get("HARBOR_CREDENTIAL_KEYS", "").split(",") if k.strip()] or [
    _local_secret("credential-key") if EMBEDDED else SECRET_KEY
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

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"harbor": {"handlers": ["console"], "level": os.environ.get("HARBOR_LOG_LEVEL", "INFO")}},
}
