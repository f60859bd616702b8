from django.apps import AppConfig


class OAuthConfig(AppConfig):
    """Tool-side OAuth as a plug-in: its models live in the approvals app's tables."""

    name = "approvals.oauth"
    label = "harbor_oauth"

    def ready(self) -> None:
        from . import calendar_agent

        calendar_agent.register()
