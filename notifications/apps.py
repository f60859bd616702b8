from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        import outbox
        from notifications.delivery import KIND, notice_deliver

        outbox.register(KIND, notice_deliver)  # every process that delivers knows the kind
