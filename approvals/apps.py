from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import outbox

        from .a2a import cancel, trip  # noqa: F401  (registers the trip agent, which delegates over A2A)
        from .oauth import calendar_agent

        calendar_agent.register()
        outbox.register(cancel.KIND, cancel.deliver_cancel)  # a remote task's cancel, owed after a commit
