"""What the topology picks: the database, the channel layer the live streams use, and Celery."""

import os
from datetime import timedelta
from typing import Any

import dj_database_url

from harbor_site.settings.bounds import HARBOR_OUTBOX_DRAIN_SECONDS, HARBOR_SWEEP_SECONDS
from harbor_site.settings.environment import DATABASE_URL, EMBEDDED, REDIS_URL, VAR_DIR

# --- The database and the live streams' layer ---------------------------------------------------
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

# --- Celery (production's workers and beat) -----------------------------------------------------
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

CELERY_BEAT_SCHEDULE = {
    "sweep": {"task": "runs.tasks.sweep", "schedule": timedelta(seconds=HARBOR_SWEEP_SECONDS)},
    "outbox": {"task": "outbox.tasks.deliver", "schedule": timedelta(seconds=HARBOR_OUTBOX_DRAIN_SECONDS)},
}
