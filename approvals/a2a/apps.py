from django.apps import AppConfig


class A2AConfig(AppConfig):
    """Remote A2A agents as a plug-in: its pause cause registered (approvals.causes), its
    models in the approvals app's tables."""

    name = "approvals.a2a"
    label = "harbor_a2a"

    def ready(self) -> None:
        import outbox
        from approvals import causes

        from . import cancel, trip  # noqa: F401  (registers the trip agent, which delegates over A2A)
        from .cause import A2A

        causes.registry.register(A2A)
        outbox.register(cancel.KIND, cancel.deliver_cancel)  # a remote task's cancel, owed after a commit
