from django.apps import AppConfig
from django.core import checks


class ApprovalsConfig(AppConfig):
    """The pause core. It registers its own causes here (an approval gate, an operator's
    pause); the others are plug-in apps that register theirs (approvals.oauth.apps,
    approvals.a2a.apps). See approvals.causes."""

    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from approvals import causes
        from approvals.models import Cause, Decision, Reason
        from runs.domain import events
        from runs.models import Role

        causes.registry.register(
            causes.PauseCause(
                name=Cause.HITL_APPROVAL,
                reasons=frozenset({Reason.APPROVAL_REQUIRED}),
                decisions=frozenset({Decision.APPROVE, Decision.REJECT}),
                deciders=frozenset({Role.APPROVER, Role.ADMIN}),
                companions=frozenset({events.TOOL_APPROVAL_REQUESTED}),
                card_template="approvals/cards/hitl_approval.html",
                run_template="runs/pauses/hitl_approval.html",
            )
        )
        causes.registry.register(
            causes.PauseCause(
                name=Cause.OPERATOR,
                reasons=frozenset({Reason.AWAIT_INPUT}),
                decisions=frozenset({Decision.RESUME}),
                deciders=frozenset({Role.OPERATOR, Role.ADMIN}),
                card_template="approvals/cards/operator.html",
                run_template="runs/pauses/operator.html",
            )
        )
        checks.register(causes_match_the_wire)


def causes_match_the_wire(**_: object) -> list[checks.CheckMessage]:
    """The product registers exactly the wire's causes: the column's choices and the
    protocol's closed set (Cause) name no cause without behaviour, and no registered cause
    is one the protocol refuses."""
    from approvals import causes
    from approvals.models import Cause

    registered, wire = causes.registry.names(), frozenset(Cause.values)
    if registered == wire:
        return []
    return [
        checks.Error(
            "the registered pause causes differ from the wire's (approvals.models.Cause):"
            f" unregistered {sorted(wire - registered)}, not on the wire {sorted(registered - wire)}",
            id="approvals.E001",
        )
    ]
