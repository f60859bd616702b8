from django.apps import AppConfig


class DemoProviderConfig(AppConfig):
    name = "approvals.oauth.provider"
    label = "demo_provider"
    verbose_name = "Demo OAuth provider"
