from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "outbox"
    verbose_name = "Outbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from outbox import embedded, nudges, tasks

        # What a commit's nudge does, per executor (HARBOR_EXECUTOR); "manual": nothing, the
        # caller drains (outbox.deliver_due).
        nudges.register("thread", embedded.nudge)
        nudges.register("celery", tasks.nudge)
