"""The operator console: home, the runs list, a run and its steering, starting a run, and
switching tenants.

Views parse, call one service and render; reads come from the selectors, so a page never
shows more than the protocol would."""

import json
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from approvals import causes
from approvals.domain import selectors as pause_selectors
from approvals.models import Pause
from runs.application import run_start, steering_submit
from runs.domain import events, instructions, selectors
from runs.domain.tokens import SIGN_IN_SEALED
from runs.identity.callers import Caller
from runs.identity.scopes import Scope, caller_scope
from runs.identity.visibility import owns_pause, pause_owner_words
from runs.kernel.errors import HarborError
from runs.models import DECISION_INSTRUCTIONS, Event, Instruction, Role, Run, RunStatus, SteeringState
from runs.web.access import MemberRequest, SignedInRequest, error_text, member_required, safe_next
from runs.web.forms import StartRunForm, SteeringFormError, steering_payload

# --- Where a person works ---------------------------------------------------------------------


@login_required
@require_POST
def tenant_switch(request: SignedInRequest) -> HttpResponse:
    """Work in another of the person's tenants: the choice lives in their session only."""
    membership = next(
        (m for m in selectors.memberships_of(user=request.user) if m.tenant.slug == request.POST.get("tenant")), None
    )
    if membership is None:
        messages.error(request, "You are not a member of that tenant.")
    else:
        request.session[selectors.ACTIVE_TENANT_SESSION_KEY] = membership.tenant_id
        messages.success(request, f"Now working in {membership.tenant.name}.")
    return redirect("home")


# --- Home --------------------------------------------------------------------------------------


@member_required
@require_GET
def home(request: MemberRequest) -> HttpResponse:
    """Approvers work in the inbox; operators and admins in the console; members in the
    console too, which shows them their own runs."""
    if request.caller.role == Role.APPROVER:
        return redirect("approvals:inbox")
    return redirect("console")


# --- The runs list -----------------------------------------------------------------------------

# What an open runs list listens for (its socket's ?types=): a run's status follows these.
CONSOLE_EVENT_TYPES = (
    events.TASK_SPAWNED,
    events.TASK_STARTED,
    events.TASK_COMPLETED,
    events.TASK_FAILED,
    events.TASK_CANCELLED,
    events.TASK_PRIORITISED,
    events.TASK_REDIRECTED,
    events.PAUSE_REQUESTED,
    events.PAUSE_RESUMED,
)


@member_required
@require_GET
def console(request: MemberRequest) -> HttpResponse:
    caller = request.caller
    status = request.GET.get("status") or ""
    if status not in RunStatus.values:
        status = ""
    runs = list(selectors.runs_visible(caller=caller, status=status or None)[:200])
    pauses = pause_selectors.open_pauses_by_run(run_ids=[run.pk for run in runs])
    rows = [{"run": run, "pause": pauses.get(run.pk)} for run in runs]
    counts = selectors.run_status_counts(caller=caller)
    context = {
        "rows": rows,
        "status": status,
        "statuses": [(value, label, counts[value]) for value, label in RunStatus.choices],
        "total": sum(counts.values()),
        "page": "console",
        "live_types": ",".join(CONSOLE_EVENT_TYPES),
    }
    if request.GET.get("fragment") == "rows":
        return render(request, "runs/_list_fragment.html", context)
    return render(request, "runs/console.html", context)


# --- A run ------------------------------------------------------------------------------------


CONTROL_ORDER = [
    Instruction.PAUSE,
    Instruction.RESUME,
    Instruction.APPROVE,
    Instruction.REJECT,
    Instruction.REDIRECT,
    Instruction.INJECT_CONTEXT,
    Instruction.USER_MESSAGE,
    Instruction.PRIORITIZE,
    Instruction.CANCEL,
]


def run_controls(caller: Caller, run: Run, pause: Pause | None) -> dict[str, bool]:
    """Which of the nine controls this person sees: a steering control where their scope on
    the run reaches its minimum; a decision where the decision rule would accept them."""
    scope = caller_scope(caller, run)
    live = not run.is_terminal
    decidable = pause is not None and pause_selectors.pause_decidable(caller=caller, pause_id=pause.pk) is not None
    takes = causes.get(pause.cause).decisions if pause is not None and decidable else frozenset()
    shown = {
        Instruction.PAUSE: live and run.status != RunStatus.PAUSED,
        Instruction.RESUME: Instruction.RESUME in takes,
        Instruction.APPROVE: Instruction.APPROVE in takes,
        Instruction.REJECT: Instruction.REJECT in takes,
        Instruction.REDIRECT: live,
        Instruction.INJECT_CONTEXT: live,
        Instruction.USER_MESSAGE: live,
        Instruction.PRIORITIZE: live,
        Instruction.CANCEL: live,
    }
    for method in shown:
        if method not in DECISION_INSTRUCTIONS:
            shown[method] = shown[method] and scope >= instructions.spec_for(method).scope
    return {method.value: shown[method] for method in CONTROL_ORDER}


def _run_context(caller: Caller, run: Run) -> dict[str, Any]:
    pause = pause_selectors.pause_open_for_run(run=run)
    controls = run_controls(caller, run, pause)
    return {
        "run": run,
        "pause": pause,
        "pause_cause": causes.get(pause.cause) if pause is not None else None,  # its templates, its answer
        # A sign-in's address, sealed in the pause, only for the one who can complete it:
        # its owner (the callback completes it for her alone), not an admin who may decide.
        "signs_in": pause is not None and SIGN_IN_SEALED in pause.payload,
        "sign_in_url": pause_selectors.pause_payload_shown(pause, True).get("AuthorizeURL", "")
        if pause and controls["resume"] and owns_pause(caller, pause)
        else "",
        "waits_for": pause_owner_words(pause) if pause else "",
        "controls": controls,
        "any_control": any(controls.values()),
        "scope": caller_scope(caller, run),
        "scope_name": Scope(caller_scope(caller, run)).name.lower(),
        "children": list(selectors.runs_visible(caller=caller).filter(parent=run)),
        "pending_steering": [s for s in selectors.run_steering(run=run) if s.state == SteeringState.PENDING],
        "tool_calls": list(run.tool_calls.order_by("step", "attempt")),
        "event_id": uuid.uuid4().hex,
        # Keyed on what changes which controls exist, so a live refresh does not wipe a
        # half-typed form when nothing about the controls changed.
        "controls_key": f"{run.status}:{pause.pk if pause else ''}",
    }


HIDDEN_KEYS = frozenset({"TaskID", *events.TOKEN_KEYS, *events.SIGN_IN_KEYS})  # capabilities, not news


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 160 else text[:159] + "…"


def timeline_entry(event: Event) -> dict[str, Any]:
    """One line of a run's timeline (the page's script renders live ones the same way)."""
    summary = " · ".join(
        f"{key}: {_short(value)}"
        for key, value in event.payload.items()
        if not key.startswith("_") and key not in HIDDEN_KEYS and value not in (None, "", [], {})
    )
    return {
        "sequence": event.sequence,
        "type": event.type,
        "category": event.type.split(".")[0],
        "summary": summary,
        "occurred_at": event.occurred_at,
    }


@member_required
@require_GET
def run_detail(request: MemberRequest, run_id: str) -> HttpResponse:
    run = selectors.run_visible(caller=request.caller, run_id=run_id)
    if run is None:
        raise Http404("no such run")
    context = _run_context(request.caller, run)
    if request.GET.get("fragment") == "state":
        return render(request, "runs/_run_state.html", context)
    logged = selectors.run_events(run=run)
    context.update(
        events=[timeline_entry(event) for event in logged],
        last_sequence=logged[-1].sequence if logged else 0,
        page="console",
    )
    return render(request, "runs/run_detail.html", context)


@member_required
@require_POST
def run_steer(request: MemberRequest, run_id: str, method: str) -> HttpResponse:
    caller = request.caller
    back = safe_next(request, reverse("run", args=[run_id]))
    run = selectors.run_visible(caller=caller, run_id=run_id)
    if run is None:
        raise Http404("no such run")
    try:
        payload = steering_payload(method, request.POST)
        receipt = steering_submit(
            caller=caller,
            run_id=run.pk,
            method=method,
            payload=payload,
            event_id=request.POST.get("event_id") or None,
            pause_id=request.POST.get("pause") if method in DECISION_INSTRUCTIONS else None,
        )
    except SteeringFormError as error:
        messages.error(request, str(error))
    except HarborError as error:
        messages.error(request, error_text(error))
    else:
        if receipt.replayed:
            messages.info(request, f"{method} was already sent; it was not sent twice.")
        else:
            messages.success(request, _confirmation(method, payload, receipt.instruction.state))
    return redirect(back)


CONFIRMATIONS = {
    "cancel": "Cancel sent: the run stops at its next step boundary.",
    "pause": "Pause sent: the run parks at its next step boundary.",
    "resume": "Resumed.",
    "approve": "Approved: the gated call runs now.",
    "reject": "Rejected: the gated call will not run and the run has ended.",
    "redirect": "Redirect sent: the planner sees the new goal on its next step.",
    "inject_context": "Context sent: the planner sees it on its next step.",
    "user_message": "Message sent.",
    "prioritize": "Priority changed.",
}


def _confirmation(method: str, payload: dict[str, Any], state: str) -> str:
    """What the page says a control did: a cancel applied at once (a parked or queued run)
    or one that interrupts the step in flight is not one waiting for a boundary."""
    if method == Instruction.CANCEL and state == SteeringState.APPLIED:
        return "Cancelled."
    if method == Instruction.CANCEL and payload.get("hard"):
        return "Cancel sent: the step in flight is interrupted and the run stops."
    return CONFIRMATIONS.get(method, f"{method} sent.")


# --- Start a run --------------------------------------------------------------------------------


@member_required
@require_http_methods(["GET", "POST"])
def run_new(request: MemberRequest) -> HttpResponse:
    form = StartRunForm(request.POST or None, initial={"agent_id": request.GET.get("agent", "deploy")})
    if request.method == "POST" and form.is_valid():
        try:
            run, _ = run_start(
                caller=request.caller,
                query=form.cleaned_data["query"],
                agent_id=form.cleaned_data["agent_id"],
                priority=form.cleaned_data["priority"],
                idempotency_key=f"start-form:{form.cleaned_data['submission']}"
                if form.cleaned_data["submission"]
                else None,
            )
        except HarborError as error:
            messages.error(request, error_text(error))
        else:
            messages.success(request, f"Started a {run.agent_id} run.")
            return redirect("run", run_id=run.pk)
    return render(request, "runs/start.html", {"form": form, "page": "start"})
