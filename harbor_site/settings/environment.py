"""What the environment says about the topology, read once for every settings section.

No DATABASE_URL / REDIS_URL: the embedded default (SQLite in WAL mode, in-memory channel
layer, runs advanced by threads inside the web process). With them: production
(PostgreSQL, channels_redis, Celery workers on a Redis broker)."""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(os.environ.get("HARBOR_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not (DATABASE_URL or REDIS_URL)
if bool(DATABASE_URL) != bool(REDIS_URL):
    raise ImproperlyConfigured("Set both DATABASE_URL and REDIS_URL (production) or neither (embedded).")
