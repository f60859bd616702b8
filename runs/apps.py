from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import tasks
        from . import streams  # noqa: F401  (a logout closes that session's live streams)
        from .runtime import agents  # noqa: F401  (registers the built-in agents and tools)
        from .runtime import dispatch, wake

        dispatch.register_wakers()
        wake.register("celery", tasks.wake_a_worker)
