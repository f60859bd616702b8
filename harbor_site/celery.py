"""Celery app: in production, workers advance runs and sweep overdue pauses."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harbor_site.settings")

app = Celery("harbor_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
