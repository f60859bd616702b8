from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    """The pause core. Its causes beyond the core's own (OAuth sign-ins, remote A2A agents)
    are plug-in apps that register themselves (approvals.oauth.apps, approvals.a2a.apps)."""

    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"
