"""What the callback does to a flow, each under the run's lock (lock order: run, pause,
then the flow): complete it (store the credential, narrate, resume the pause) or record a
denial (the pause resolves `reject`, terminal). The code exchange happens before, outside
any transaction: a provider call never holds a lock."""

from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone

from approvals.domain.services import pause_close, pause_decide
from approvals.models import Decision, Pause
from runs.domain import events
from runs.domain.tokens import SIGN_IN_SEALED
from runs.domain.transitions import run_reject
from runs.identity.callers import Caller
from runs.models import Run, Tenant
from runs.runtime.wake import wake_on_commit

from .credentials import credential_store
from .flows import EXCHANGING, flow_begin, unclaimed
from .models import OAuthFlow
from .sources import Source, source_get


class FlowGone(Exception):
    """The flow was used, or its pause resolved, while the callback was working."""


def flow_claim(flow: OAuthFlow) -> bool:
    """Take an unused flow for one callback's code exchange, in one guarded UPDATE: the
    provider takes a code once, so a replay arriving meanwhile finds the flow used (404),
    not a refused exchange. False when another callback took it first."""
    claimed = OAuthFlow.objects.filter(unclaimed(), pk=flow.pk).update(used_at=timezone.now(), outcome=EXCHANGING)
    return bool(claimed)


def flow_release(flow: OAuthFlow) -> None:
    """Give a claimed flow back after an exchange the provider failed: the person may try again."""
    OAuthFlow.objects.filter(pk=flow.pk, outcome=EXCHANGING).update(used_at=None, outcome="")


def flow_abandon(flow: OAuthFlow) -> None:
    """A claimed flow whose pause resolved meanwhile (a cancel won): used, never completed."""
    OAuthFlow.objects.filter(pk=flow.pk, outcome=EXCHANGING).update(outcome="abandoned")


def _locked(flow: OAuthFlow, *, claimed: bool) -> tuple[Run, Pause, OAuthFlow]:
    run = Run.objects.locked().get(pk=flow.run_id)
    pause = Pause.objects.select_for_update(no_key=True).get(pk=flow.pause_id)
    locked = OAuthFlow.objects.select_for_update().get(pk=flow.pk)
    usable = locked.outcome == EXCHANGING if claimed else OAuthFlow.objects.filter(unclaimed(), pk=flow.pk).exists()
    # A pause a sign-in resolves parked with one (its address sealed in the payload): a
    # tool's own, or a remote agent's auth-required that names a known source.
    if not usable or not pause.is_open or SIGN_IN_SEALED not in pause.payload:
        raise FlowGone("this sign-in was already completed, or the run no longer waits for it")
    return run, pause, locked


def flow_complete(*, flow: OAuthFlow, source: Source, token: dict) -> Pause:
    """Store the credential and resume the pause through the one decision path, as the
    pausing identity (the flow is bound to it, and the callback checked the signed-in
    person is that identity). The flow was claimed for this exchange (flow_claim)."""
    with events.atomic():
        run, pause, locked = _locked(flow, claimed=True)
        credential_store(tenant=run.tenant, user=locked.user, source=source, token=token)
        OAuthFlow.objects.filter(pk=locked.pk).update(used_at=timezone.now(), outcome="completed")
        events.emit(
            run=run,
            type=events.TOOL_AUTH_COMPLETED,
            pause=pause,
            payload={"SourceName": source.display_name, "PauseToken": events.SEALED},
        )
        caller = Caller(tenant=run.tenant, user=locked.user, session=pause.identity_session)
        pause_decide(
            caller=caller, run=run, method="resume", pause_id=pause.pk, reason=f"signed in to {source.display_name}"
        )
        wake_on_commit()
        return pause


def flow_deny(*, flow: OAuthFlow, source: Source, error: str) -> Pause:
    """The person refused consent upstream: the pause resolves `reject` and the run ends."""
    with events.atomic():
        run, pause, locked = _locked(flow, claimed=False)
        OAuthFlow.objects.filter(pk=locked.pk).update(used_at=timezone.now(), outcome="denied")
        reason = f"{locked.user.get_username()} denied access to {source.display_name} ({error})"
        pause_close(run=run, pause=pause, decision=Decision.REJECT, reason=reason)
        run_reject(run, reason)
        return pause


def flow_restart(*, tenant: Tenant, user: User, pause_id: str) -> str:
    """Start the sign-in of a person's open tool_oauth pause again (its flow expired): a new
    state and verifier, the earlier flows of the pause retired. The new authorize URL."""
    previous = OAuthFlow.objects.filter(pause_id=pause_id, tenant=tenant, user=user).order_by("-created_at").first()
    if previous is None:
        raise FlowGone("no sign-in of yours waits under that pause")
    run = Run.objects.select_related("tenant", "owner").get(pk=previous.run_id)
    pending = flow_begin(run=run, source=source_get(tenant, previous.source_name))  # no provider call
    with events.atomic():
        Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        pause = Pause.objects.select_for_update(no_key=True).get(pk=pause_id)
        if not pause.is_open:
            raise FlowGone("the run no longer waits for this sign-in")
        # A flow mid-exchange is retired too: a failed exchange must not give it back.
        earlier = OAuthFlow.objects.filter(pause=pause).filter(Q(used_at=None) | Q(outcome=EXCHANGING))
        earlier.update(used_at=timezone.now(), outcome="superseded")
        pending.bind(pause)
    return pending.authorize_url
