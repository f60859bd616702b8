"""Sign-in flows: begun by a tool that lacks a credential, bound to its pause in the
transaction that parks the run, claimed once by the callback.

The `state` is 256 bits from a CSPRNG, kept only as a keyed digest; the PKCE verifier only
sealed. A flow is bound to the pausing (tenant, user), the run and the pause, and to the
browser that begins it (approvals.oauth.begin: its address is the pause's `AuthorizeURL`),
and lives for HARBOR_OAUTH_FLOW_TTL seconds."""

import secrets
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.backends.base import SessionBase
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from approvals.models import Pause
from runs.models import Run, Tenant

from . import client
from .models import OAuthFlow
from .sealing import digests, seal
from .sources import Source

STATE_PREFIX = "hrbs_"
_BEGUN = "harbor_oauth_begun"  # in a login session: {flow id: the nonce its browser began it with}
_KEPT = 10  # the latest few


@dataclass(frozen=True)
class PendingFlow:
    """A flow begun by a tool, not yet stored: it is written with its pause (`bind`)."""

    tenant: Tenant
    user: User
    run_id: str
    source: Source
    state: str
    verifier: str
    redirect_uri: str
    authorize_url: str

    def bind(self, pause: Pause) -> OAuthFlow:
        """Store the flow, bound to the pause just minted (inside the parking transaction)."""
        return OAuthFlow.objects.create(
            tenant=self.tenant,
            user=self.user,
            run_id=self.run_id,
            pause=pause,
            source_name=self.source.name,
            state_digest=digests(self.state)[0],
            verifier_sealed=seal(self.verifier),
            redirect_uri=self.redirect_uri,
            scopes=" ".join(self.source.scopes),
            expires_at=timezone.now() + timedelta(seconds=settings.HARBOR_OAUTH_FLOW_TTL),
        )


def flow_begin(*, run: Run, source: Source) -> PendingFlow:
    state = f"{STATE_PREFIX}{secrets.token_urlsafe(32)}"
    verifier = client.new_verifier()
    redirect_uri = settings.HARBOR_OAUTH_REDIRECT_URI
    return PendingFlow(
        tenant=run.tenant,
        user=run.owner,
        run_id=run.pk,
        source=source,
        state=state,
        verifier=verifier,
        redirect_uri=redirect_uri,
        authorize_url=sign_in_url(state),
    )


EXCHANGING = "exchanging"  # a flow's outcome while one callback trades its code


def claim_lapse() -> timedelta:
    """A callback's claim on a flow lasts its code exchange (and a revocation or two, each
    within HARBOR_OAUTH_CALL_SECONDS); one older than this was left by a process that died
    mid-exchange, and holds the flow no more."""
    return timedelta(seconds=max(60.0, 4 * settings.HARBOR_OAUTH_CALL_SECONDS))


def unclaimed() -> Q:
    """The flows no callback holds: never used, or claimed by one that died mid-exchange."""
    return Q(used_at=None) | Q(outcome=EXCHANGING, used_at__lt=timezone.now() - claim_lapse())


def flow_find(state: str) -> OAuthFlow | None:
    """The flow a `state` names (under any configured key), if it is unused and its pause
    still waits: the only one a sign-in may begin or complete."""
    if not state.startswith(STATE_PREFIX) or len(state) > 200:
        return None
    flows = OAuthFlow.objects.select_related("tenant", "user", "pause").filter(state_digest__in=digests(state))
    flow = flows.filter(unclaimed()).first()
    return flow if flow is not None and flow.pause.is_open else None


def flow_expired(flow: OAuthFlow) -> bool:
    return flow.expires_at <= timezone.now()


def begin_here(session: SessionBase, flow: OAuthFlow, state: str) -> str:
    """The browser of this login session begins the flow (approvals.oauth.begin): the state
    it takes to the provider, the flow's own and a nonce kept in this session only. The
    provider's answer counts only with both, so knowing the flow's state (every reader
    the pause's token reaches does) forges neither a code nor a denial."""
    nonce = secrets.token_urlsafe(16)
    begun = dict(list(session.get(_BEGUN, {}).items())[-(_KEPT - 1) :])
    session[_BEGUN] = {**begun, flow.pk: nonce}
    return f"{state}{_NONCE}{nonce}"


def begun_here(session: SessionBase, flow: OAuthFlow, nonce: str) -> bool:
    """Whether the browser of this login session began the flow with this nonce."""
    kept = session.get(_BEGUN, {}).get(flow.pk)
    return bool(kept) and secrets.compare_digest(kept, nonce)


def split_state(returned: str) -> tuple[str, str]:
    """A provider's returned state: the flow's state, and the nonce of the browser that began it."""
    state, _, nonce = returned.partition(_NONCE)
    return state, nonce


_NONCE = "."  # never in a state or nonce (URL-safe base64)


def sign_in_url(state: str) -> str:
    """Where a person begins the sign-in of `state` (the `AuthorizeURL` a pause carries):
    Harbor's own address, on the origin the provider sends her back to."""
    origin = urlsplit(settings.HARBOR_OAUTH_REDIRECT_URI)
    return urlunsplit((origin.scheme, origin.netloc, reverse("oauth:begin"), urlencode({"state": state}), ""))
