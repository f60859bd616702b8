"""The reads that grow with history: a pause.list page (what POST /v1/pause/list does after
authentication) for an approver and a member, and the approver's /inbox/ pages."""

import statistics
import time
import warnings
from collections.abc import Callable
from urllib.parse import urlencode

from django.test import Client

from approvals.domain.selectors import inbox_page, pause_cursor, pause_list, tokens_shown
from approvals.models import Pause, PauseState
from runs.identity.callers import Caller
from runs.protocol.serializers import PauseListResponseSerializer

from .common import percentile

TIMES = 30


def _ms(action: Callable[[], object]) -> list[float]:
    spent = []
    for _ in range(TIMES):
        began = time.perf_counter()
        action()
        spent.append((time.perf_counter() - began) * 1000)
    return sorted(spent)


def _pause_list_page(caller: Caller) -> object:
    page = pause_list(caller=caller)
    context = {"may_see_token": tokens_shown(caller=caller, pauses=page.rows)}
    return PauseListResponseSerializer(page, context=context).data


def rows(write: Callable[[str], None], member: Caller, approver: Caller, size: int) -> None:
    open_count = Pause.objects.filter(tenant=approver.tenant, state=PauseState.PAUSED).count()
    approver_ms = _ms(lambda: _pause_list_page(approver))
    member_ms = _ms(lambda: _pause_list_page(member))
    # The test client serves no static files; WhiteNoise's warning that it found none is noise here.
    warnings.filterwarnings("ignore", message="No directory at")
    client = Client()
    client.force_login(approver.user)
    if client.get("/inbox/").status_code != 200:
        raise RuntimeError("/inbox/ did not answer 200 for the approver")
    inbox = _ms(lambda: client.get("/inbox/"))
    # An older page, half way down the open pauses (keyset: the same cost at any depth).
    older = inbox_page(caller=approver, size=max(1, open_count // 2)).next_cursor
    older_path = f"/inbox/?{urlencode({'before': older})}" if older else "/inbox/"
    older_ms = _ms(lambda: client.get(older_path))
    # What every open inbox asks on a pause event: the cards since its newest one.
    newest = inbox_page(caller=approver, size=1).pauses
    since = f"/inbox/?{urlencode({'fragment': 'cards', 'after': pause_cursor(newest[0])})}" if newest else "/inbox/"
    since_ms = _ms(lambda: client.get(since))
    label = f"{size} pauses ({open_count} open)"
    write(
        f"  pause.list page, p95 ms, {label}: approver {percentile(approver_ms, 0.95):.1f}, "
        f"member {percentile(member_ms, 0.95):.1f}"
    )
    write(
        f"  /inbox/ for an approver, p50 ms, {label}: {statistics.median(inbox):.1f}"
        f" (a page half way down: {statistics.median(older_ms):.1f}; {len(client.get('/inbox/').content) // 1024} KB)"
    )
    write(f"  /inbox/ live update (cards since the newest), p50 ms: {statistics.median(since_ms):.1f}")
