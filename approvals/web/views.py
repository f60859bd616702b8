"""The approvals inbox: open pauses the signed-in person may decide, each rendered for its
cause, and the history of past decisions. Decisions go through the steering service, like
the protocol's."""

import uuid
from urllib.parse import parse_qs, urlencode, urlsplit

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from approvals import causes
from approvals.domain import selectors
from approvals.models import Pause
from approvals.web.argument_fields import RefusedEdit, argument_fields
from approvals.web.forms import decision_payload
from runs.application import steering_submit
from runs.domain import events
from runs.identity.visibility import owns_pause, pause_owner_words
from runs.kernel.errors import HarborError, PayloadInvalid
from runs.models import DECISION_INSTRUCTIONS
from runs.web.access import MemberRequest, error_text, member_required, safe_next
from runs.web.forms import SteeringFormError

DONE = {
    "approve": "Approved {tool}: the call runs now.",
    "reject": "Rejected {tool}: the call will not run and the run has ended.",
    "resume": "Resumed the {agent} run.",
}


QUESTION_KEYS = ("Question", "Prompt", "Message", "Text", "Summary")


def pause_card(pause: Pause, *, may_decide: bool, owns: bool = False, refused: RefusedEdit | None = None) -> dict:
    """What a card shows: its cause's template (approvals.causes), and what the templates
    read from the payload: a gate's arguments (as fields its tool's schema shapes, with a
    refused edit's problems), a sign-in address (to the one who may decide, as its token), a
    remote agent's question."""
    payload = selectors.pause_payload_shown(pause, may_decide)
    args = argument_fields(payload, refused)
    url = payload.get("AuthorizeURL") or ""
    return {
        "pause": pause,
        "cause": causes.active().find(pause.cause),
        "payload": payload,
        "args": args,
        "editable": bool(payload.get("Editable")),
        "refused": refused is not None,
        "question": next((payload[k] for k in QUESTION_KEYS if isinstance(payload.get(k), str)), ""),
        # Only a web address becomes a link: never a javascript: or data: one.
        "authorize_url": url if urlsplit(url).scheme in ("http", "https") else "",
        "source": payload.get("SourceName") or "the provider",
        "may_decide": may_decide,
        # A sign-in is the owner's own (the callback completes it for her alone): others
        # read whom it waits for instead of a button.
        "yours": owns,
        "waits_for": pause_owner_words(pause),
        "event_id": uuid.uuid4().hex,
        "decide_url": reverse("approvals:decide", args=[pause.pk]),
        "run_url": reverse("run", args=[pause.run_id]),
        "tally": pause.approvals_so_far(),  # under a rule: "1 of 2 approvals: bob"
    }


# What an open inbox listens for (its socket's ?types=): pauses opening and closing, and who
# decided; not every step of every run.
INBOX_EVENT_TYPES = (events.PAUSE_REQUESTED, events.PAUSE_RESUMED, events.TOOL_APPROVED, events.TOOL_REJECTED)

# Cards on one page: a screenful or two. Older ones follow by keyset ("Show older"), so
# the page costs the same whatever the inbox holds.
INBOX_PAGE_SIZE = 20


@member_required
@require_GET
def inbox(request: MemberRequest) -> HttpResponse:
    # `after`: a live page asks only for the cards that arrived since its newest one.
    context = _inbox_context(request, before=request.GET.get("before") or None, after=request.GET.get("after") or None)
    if request.GET.get("fragment") == "cards":
        return render(request, "approvals/_cards.html", context)
    return render(request, "approvals/inbox.html", context)


def _inbox_context(
    request: MemberRequest,
    *,
    before: str | None,
    after: str | None = None,
    refused: dict[str, RefusedEdit] | None = None,
) -> dict:
    """A page of the inbox; `refused`: the edits refused on its cards, by pause id."""
    refused = refused or {}
    page = selectors.inbox_page(caller=request.caller, before=before, after=after, size=INBOX_PAGE_SIZE)
    may_decide = selectors.tokens_shown(caller=request.caller, pauses=page.pauses)
    return {
        "cards": [
            pause_card(
                pause,
                may_decide=may_decide(pause.pk),
                owns=owns_pause(request.caller, pause),
                refused=refused.get(pause.pk),
            )
            | {"cursor": selectors.pause_cursor(pause)}
            for pause in page.pauses
        ],
        "open_count": page.total,
        "next_cursor": page.next_cursor,
        "before": before,
        # A decision made on an older page (without JavaScript) comes back to it.
        "back_url": f"{reverse('approvals:inbox')}?{urlencode({'before': before})}" if before else "",
        "tab": "open",
        "page": "inbox",
        "live_types": ",".join(INBOX_EVENT_TYPES),
    }


@member_required
@require_GET
def history(request: MemberRequest) -> HttpResponse:
    pauses = list(selectors.pause_history(caller=request.caller))
    open_count = selectors.pauses_decidable_count(caller=request.caller)
    return render(
        request,
        "approvals/history.html",
        {"pauses": pauses, "tab": "history", "page": "inbox", "open_count": open_count},
    )


@member_required
@require_POST
def decide(request: MemberRequest, pause_id: str) -> HttpResponse:
    back = safe_next(request, reverse("approvals:inbox"))
    method = request.POST.get("method", "")
    if method not in DECISION_INSTRUCTIONS:
        messages.error(request, "Choose approve, reject or resume.")
        return redirect(back)
    pause = selectors.pause_in_tenant(caller=request.caller, pause_id=pause_id)
    if pause is None:
        messages.error(request, "Not found: no such pause.")
        return redirect(back)
    try:
        steering_submit(
            caller=request.caller,
            run_id=pause.run_id,
            method=method,
            payload=decision_payload(method, pause, request.POST),
            event_id=request.POST.get("event_id") or None,
            pause_id=pause.pk,
        )
    except SteeringFormError as error:
        messages.error(request, str(error))
    except PayloadInvalid as error:
        if not error.fields:
            messages.error(request, error_text(error))
            return redirect(back)
        # Nothing was decided: the page again, each refused argument's problem beside its field.
        messages.error(request, f"Not approved: {pause.tool}'s arguments need fixing (see the card).")
        typed = {key.removeprefix("arg-"): str(value) for key, value in request.POST.items() if key.startswith("arg-")}
        refused = {pause.pk: RefusedEdit(values=typed, problems=error.fields)}
        before = parse_qs(urlsplit(back).query).get("before", [None])[0]
        return render(
            request, "approvals/inbox.html", _inbox_context(request, before=before, refused=refused), status=422
        )
    except HarborError as error:
        messages.error(request, error_text(error))
    else:
        pause.refresh_from_db()
        tally = pause.approvals_so_far() if pause.is_open else None
        if tally is not None:  # short of the rule's quorum: the gate waits for the others
            messages.success(request, f"Your approval of {pause.tool} is recorded: {tally} (rule {tally.rule}).")
        else:
            messages.success(request, DONE[method].format(tool=pause.tool or "the call", agent=pause.run.agent_id))
    return redirect(back)
