from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from compat import psycopg_pool
        from runs import tasks
        from runs.application import departures  # noqa: F401  (a person who leaves loses their streams and delegations)
        from runs.runtime import (
            agents,  # noqa: F401  (registers the built-in agents and tools)
            dispatch,
            instructions,
            wake,
        )
        from runs.web import access  # noqa: F401  (a logout closes that session's live streams)

        psycopg_pool.install()  # a pool whose connections were all dropped hands out a live one at once
        instructions.instructions_register()  # the nine steering instructions, before any route is built
        dispatch.register_wakers()
        wake.register("celery", tasks.wake_a_worker)
