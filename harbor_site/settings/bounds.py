"""Harbor's own settings (HARBOR_*): whom the API trusts, how runs are advanced, and the
bounds on what a caller, a worker or a remote server may take."""

import json
import os

from django.core.exceptions import ImproperlyConfigured

from harbor_site.settings.environment import EMBEDDED

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
