"""The inbox in pages: a page of the newest cards, older ones by a cursor link that works
without JavaScript, every open pause on exactly one page, each tenant's own, and a page's
statements fixed whatever the history holds."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.domain import selectors
from approvals.models import Pause, PauseState
from approvals.web import views
from bench.seed import seed_history
from runs.identity.callers import Caller
from runs.identity.permissions import membership_grant
from runs.models import Role
from tests.factories import UserFactory

PAUSE_ID = re.compile(r'<article class="card[^"]*" id="pause-([0-9A-Z]+)"')
NEXT = re.compile(r'href="(/inbox/\?before=[^"]+)" data-more-link')


def signed_in(name: str) -> Client:
    client = Client()
    client.login(username=name, password=f"{name}-password")
    return client


def seed(caller: Caller, decider: Caller, open_pauses: int) -> None:
    """History with `open_pauses` open ones (one pause in a hundred is left open)."""
    seed_history(caller=caller, count=open_pauses * 100, decider=decider.user)


def newest_first(tenant_id: int) -> list[str]:
    return list(
        Pause.objects.filter(tenant_id=tenant_id, state=PauseState.PAUSED)
        .order_by("-created_at", "-pk")
        .values_list("pk", flat=True)
    )


def older_link(page: str) -> str:
    """The "Show older pauses" address of a page."""
    found = NEXT.search(page)
    assert found, "no link to older pauses"
    return found.group(1).replace("&amp;", "&")


def walk(client: Client, path: str = "/inbox/") -> list[list[str]]:
    """Every page from `path` on, following the "Show older pauses" links."""
    pages: list[list[str]] = []
    next_path: str | None = path
    while next_path:
        page = client.get(next_path).content.decode()
        pages.append(PAUSE_ID.findall(page))
        found = NEXT.search(page)
        next_path = found.group(1).replace("&amp;", "&") if found else None
        assert len(pages) < 50, "the links never end"
    return pages


@pytest.fixture
def acme_history(people):
    seed(people.caller("alice"), people.caller("bob"), open_pauses=30)
    return newest_first(people.acme.pk)


def test_the_first_page_holds_the_newest_cards_and_counts_them_all(people, acme_history):
    page = signed_in("bob").get("/inbox/").content.decode()
    assert PAUSE_ID.findall(page) == acme_history[: views.INBOX_PAGE_SIZE]
    assert re.search(r"data-open-count>30<", page)  # the total, not the cards shown
    assert NEXT.search(page) and "Show older pauses" in page


def test_the_pages_show_every_open_pause_once_in_order(people, acme_history, monkeypatch):
    monkeypatch.setattr(views, "INBOX_PAGE_SIZE", 7)
    # Four pauses opened in the same microsecond, across a page boundary: the id orders them.
    same = Pause.objects.filter(pk__in=acme_history[5:9])
    same.settle(created_at=Pause.objects.get(pk=acme_history[5]).created_at)
    expected = newest_first(people.acme.pk)
    pages = walk(signed_in("bob"))
    assert [len(page) for page in pages] == [7, 7, 7, 7, 2]
    assert sum(pages, []) == expected  # no card twice, none missing, newest first


def test_an_older_page_and_its_fragment_show_the_same_cards(people, acme_history):
    bob = signed_in("bob")
    first = bob.get("/inbox/").content.decode()
    older = older_link(first)
    page = bob.get(older).content.decode()
    fragment = bob.get(f"{older}&fragment=cards").content.decode()
    assert PAUSE_ID.findall(page) == PAUSE_ID.findall(fragment) == acme_history[views.INBOX_PAGE_SIZE :]
    assert 'data-total="30"' in fragment and "Back to the newest" in page
    assert not NEXT.search(page)  # the last page


def test_a_decision_on_an_older_page_comes_back_to_it(people, acme_history):
    bob = signed_in("bob")
    older = older_link(bob.get("/inbox/").content.decode())
    page = bob.get(older).content.decode()
    pause_id = PAUSE_ID.findall(page)[0]
    back = re.search(r'name="next" value="([^"]+)"', page)
    assert back and back.group(1).replace("&amp;", "&") == older  # the form returns here
    response = bob.post(f"/inbox/pauses/{pause_id}/decide/", {"method": "reject", "next": older})
    assert response.status_code == 302 and response["Location"] == older
    assert Pause.objects.get(pk=pause_id).state == PauseState.RESUMED


def test_an_unreadable_cursor_shows_the_first_page(people, acme_history):
    page = signed_in("bob").get("/inbox/?before=not-a-cursor").content.decode()
    assert PAUSE_ID.findall(page) == acme_history[: views.INBOX_PAGE_SIZE]


def test_each_tenant_pages_through_its_own_pauses_only(people, acme_history):
    hugo = UserFactory.create(username="hugo")
    membership_grant(tenant=people.globex, user=hugo, role=Role.APPROVER)
    seed(people.caller("gina"), people.caller("gina"), open_pauses=3)
    globex = newest_first(people.globex.pk)
    assert sum(walk(signed_in("hugo")), []) == globex
    # A cursor taken from acme's pages moves globex's reader within globex only.
    acme_cursor = older_link(signed_in("bob").get("/inbox/").content.decode())
    assert set(sum(walk(signed_in("hugo"), acme_cursor), [])) <= set(globex)
    assert set(sum(walk(signed_in("bob")), [])) == set(acme_history)
    for name in ("alice", "gina", "olivia"):  # may decide none of them (member, member, operator)
        assert walk(signed_in(name)) == [[]]


def inbox_statements(client: Client, path: str) -> list[str]:
    client.get(path)  # warm the caches a long-lived process has
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path).status_code == 200
    return [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]


def test_a_page_costs_the_same_statements_whatever_the_history(people, acme_history):
    bob = signed_in("bob")
    older = older_link(bob.get("/inbox/").content.decode())
    before = [inbox_statements(bob, path) for path in ("/inbox/", older)]
    # Ten times the history, and ten times the open pauses.
    seed_history(caller=people.caller("alice"), count=27_000, decider=people.caller("bob").user)
    assert Pause.objects.filter(state=PauseState.PAUSED).count() == 300
    after = [inbox_statements(bob, path) for path in ("/inbox/", older)]
    assert [len(s) for s in after] == [len(s) for s in before]
    for statements in after:
        # The page of cards and the count: no statement per card.
        assert len([sql for sql in statements if "approvals_pause" in sql]) == 2, statements
        assert len(statements) <= 12, statements


def test_a_long_inbox_is_counted_up_to_a_cap(people, acme_history, monkeypatch):
    monkeypatch.setattr(selectors, "INBOX_COUNT_CAP", 20)
    bob = signed_in("bob")
    assert re.search(r"data-open-count>20\+<", bob.get("/inbox/").content.decode())
    assert re.search(r"data-open-count>20\+<", bob.get("/inbox/history/").content.decode())
    monkeypatch.setattr(selectors, "INBOX_COUNT_CAP", 30)
    assert re.search(r"data-open-count>30<", bob.get("/inbox/").content.decode())  # exact up to the cap


def test_a_live_page_asks_only_for_what_arrived_since_its_newest_card(people, acme_history):
    bob = signed_in("bob")
    third = Pause.objects.get(pk=acme_history[2])
    since = bob.get(f"/inbox/?fragment=cards&after={selectors.pause_cursor(third)}").content.decode()
    assert PAUSE_ID.findall(since) == acme_history[:2] and 'data-total="30"' in since
    assert "data-next" not in since  # all of it fits: nothing to reconcile
    newest = Pause.objects.get(pk=acme_history[0])
    nothing = bob.get(f"/inbox/?fragment=cards&after={selectors.pause_cursor(newest)}").content.decode()
    assert PAUSE_ID.findall(nothing) == [] and 'data-total="30"' in nothing
    oldest = Pause.objects.get(pk=acme_history[-1])
    burst = bob.get(f"/inbox/?fragment=cards&after={selectors.pause_cursor(oldest)}").content.decode()
    assert PAUSE_ID.findall(burst) == acme_history[: views.INBOX_PAGE_SIZE] and "data-next" in burst
