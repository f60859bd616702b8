"""Refused decisions are throttled per identity first, per address only as a coarse ceiling."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Count
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
        recent = DecisionRefusal.objects.filter(created_at__gte=timezone.now() - window)
        per_identity = getattr(settings, "HARBOR_REFUSALS_PER_IDENTITY", 10)
        per_address = getattr(settings, "HARBOR_REFUSALS_PER_ADDRESS", 100)
        self.wait_seconds = int(window.total_seconds())
        mine = recent.filter(actor_tenant=caller.tenant.slug, actor_user=caller.user.username)
        if mine.count() >= per_identity:
            return False
        if caller.address:
            by_identity = (
                recent.filter(address=caller.address)
                .order_by()
                .values("actor_tenant", "actor_user")
                .annotate(n=Count("id"))
                .values_list("n", flat=True)
            )
            total = 0
            for count in by_identity.iterator():
                total += min(count, per_identity)
                if total >= per_address:
                    return False
        return True

    def wait(self) -> float:
        return getattr(self, "wait_seconds", 60)
