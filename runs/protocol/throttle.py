"""Refused decisions are throttled per identity first, per address only as a coarse ceiling."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Case, Count, Q, Sum, When
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from approvals.models import DecisionRefusal
from runs.identity.callers import Caller
from runs.models import DECISION_INSTRUCTIONS


class DecisionRefusalThrottle(BaseThrottle):
    """Step 5: token guessing. Refused decisions are audited (approvals.DecisionRefusal).
    Each identity (tenant, user) has its own budget; an address has only a coarse ceiling,
    to which one identity adds at most its own budget, so one person's refusals never lock
    out the others behind the same address. The address is the client's, resolved through
    the trusted proxies (runs.protocol.middleware), not the proxy's."""

    def allow_request(self, request: Request, view: APIView) -> bool:
        if getattr(view, "method", None) not in DECISION_INSTRUCTIONS or not isinstance(request.auth, Caller):
            return True
        caller: Caller = request.auth
        window = timedelta(seconds=getattr(settings, "HARBOR_REFUSAL_WINDOW_SECONDS", 900))
        per_identity = getattr(settings, "HARBOR_REFUSALS_PER_IDENTITY", 10)
        per_address = getattr(settings, "HARBOR_REFUSALS_PER_ADDRESS", 100)
        self.wait_seconds = int(window.total_seconds())
        # In one statement: the caller's refusals in the window, and those from its address,
        # per identity. With no address known, only the caller's own.
        mine = Q(actor_tenant=caller.tenant.slug, actor_user=caller.user.username)
        here = Q(address=caller.address) if caller.address is not None else Q(pk__in=[])
        counts = (
            DecisionRefusal.objects.filter(Q(created_at__gte=timezone.now() - window) & (mine | here))
            .order_by()
            .values_list("actor_tenant", "actor_user")
            .annotate(total=Count("pk"), from_here=Sum(Case(When(here, then=1), default=0)))
        )
        me = (caller.tenant.slug, caller.user.username)
        my_total, identities_here, at_address = 0, 0, 0
        for tenant, user, total, from_here in counts:
            if (tenant, user) == me:
                my_total = total
            if from_here:
                identities_here += 1
                at_address += min(from_here, per_identity)
        return my_total < per_identity and not (identities_here and at_address >= per_address)

    def wait(self) -> float:
        return getattr(self, "wait_seconds", 60)
