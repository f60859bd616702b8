from django.apps import AppConfig


class OAuthConfig(AppConfig):
    """Tool-side OAuth as a plug-in: its pause cause registered (approvals.causes), its
    models in the approvals app's tables."""

    name = "approvals.oauth"
    label = "harbor_oauth"

    def ready(self) -> None:
        from approvals import causes

        from . import calendar_agent
        from .cause import TOOL_OAUTH

        causes.registry.register(TOOL_OAUTH)
        calendar_agent.register()
