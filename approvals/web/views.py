"""The approvals inbox: open pauses the signed-in person may decide, each rendered for its
cause, and the history of past decisions. Decisions go through the steering service, like
the protocol's."""

import json
import uuid
from urllib.parse import urlencode, urlsplit

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from approvals import causes
from approvals.domain import selectors
from approvals.models import Pause
from approvals.web.forms import decision_payload
from runs.application import steering_submit
from runs.domain import events
from runs.identity.visibility import owns_pause, pause_owner_words
from runs.kernel.errors import HarborError
from runs.models import DECISION_INSTRUCTIONS
from runs.web.access import MemberRequest, error_text, member_required, safe_next
from runs.web.forms import SteeringFormError

DONE = {
    "approve": "Approved {tool}: the call runs now.",
    "reject": "Rejected {tool}: the call will not run and the run has ended.",
    "resume": "Resumed the {agent} run.",
}


QUESTION_KEYS = ("Question", "Prompt", "Message", "Text", "Summary")


def pause_card(pause: Pause, *, may_decide: bool, owns: bool = False) -> dict:
    """What a card shows: its cause's template (approvals.causes), and what the templates
    read from the payload: a gate's arguments (as editable text), a sign-in address (to
    the one who may decide, as its token), a remote agent's question."""
    payload = selectors.pause_payload_shown(pause, may_decide)
    args = [
        {"name": name, "value": value if isinstance(value, str) else json.dumps(value)}
        for name, value in (payload.get("Args") or {}).items()
    ]
    url = payload.get("AuthorizeURL") or ""
    return {
        "pause": pause,
        "cause": causes.active().find(pause.cause),
        "payload": payload,
        "args": args,
        "editable": bool(payload.get("Editable")),
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
    before = request.GET.get("before") or None
    # `after`: a live page asks only for the cards that arrived since its newest one.
    after = request.GET.get("after") or None
    page = selectors.inbox_page(caller=request.caller, before=before, after=after, size=INBOX_PAGE_SIZE)
    may_decide = selectors.tokens_shown(caller=request.caller, pauses=page.pauses)
    context = {
        "cards": [
            pause_card(pause, may_decide=may_decide(pause.pk), owns=owns_pause(request.caller, pause))
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
    if request.GET.get("fragment") == "cards":
        return render(request, "approvals/_cards.html", context)
    return render(request, "approvals/inbox.html", context)


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
    except HarborError as error:
        messages.error(request, error_text(error))
    else:
        messages.success(request, DONE[method].format(tool=pause.tool or "the call", agent=pause.run.agent_id))
    return redirect(back)
