"""Who may listen on the pages' websocket, checked at connect and re-checked while it is open.

A socket listens as long as its login session still signs its person in (as a page would
decide) and the person is an active member of the tenant: the re-checks of a batch of
sockets take a few queries in all. The close codes say why a socket stopped listening."""

import functools
from importlib import import_module
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.base import SessionBase
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from runs.domain import selectors
from runs.identity import sessions
from runs.identity.callers import Caller
from runs.identity.sessions import web_session_for_key
from runs.identity.visibility import viewer_of
from runs.models import Membership

if TYPE_CHECKING:  # a batch of reads re-checks through here: the annotation needs no import at runtime
    from runs.web.sockets.reads import Read

# Close codes (4000-4999 are the application's): the page shows why it stopped listening.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_INVALID = 4400
CLOSE_TOO_MANY = 4429  # the person holds HARBOR_WS_MAX_PER_USER sockets here already: the page retries later
CLOSE_CHANGED = 4409  # the person's role changed: what the page shows (decide buttons, runs) is stale, it reloads


def _caller_for(user_id: int, tenant_id: int, session: str) -> Caller | None:
    """The person as a Caller of the tenant they connected in, or None once revoked."""
    membership = (
        Membership.objects.select_related("tenant", "user").filter(user_id=user_id, tenant_id=tenant_id).first()
    )
    if membership is None or not membership.user.is_active:
        return None
    return Caller(tenant=membership.tenant, user=membership.user, session=session)


def connect_plan(user: User, session: str, page_session: SessionBase | None, run_id: str | None) -> dict:
    # The tenant the page shows: the one chosen in the login session, as the pages use.
    membership = selectors.membership_for_user(user=user, session=page_session)
    if membership is None:
        return {"close": CLOSE_FORBIDDEN}
    caller = _caller_for(user.pk, membership.tenant_id, session)
    if caller is None:
        return {"close": CLOSE_FORBIDDEN}
    if run_id is not None and selectors.run_visible(caller=caller, run_id=run_id) is None:
        return {"close": CLOSE_NOT_FOUND}  # missing and foreign runs look alike
    return {"tenant": caller.tenant.pk, "slug": caller.tenant.slug, "viewer": viewer_of(caller)}


# What a login session signs in: the user id and the password-derived hash it was signed in
# with (Django's HASH_SESSION_KEY), or None once logged out or expired.
SignedIn = tuple[str, str] | None


def _signed_in_users(session_keys: set[str]) -> dict[str, SignedIn]:
    """What each login session signs in (SESSION_KEY and its session auth hash)."""
    engine = import_module(settings.SESSION_ENGINE)
    if engine is not sessions:  # another engine: one load per session
        return {key: _signed_in(engine.SessionStore(key).load()) for key in session_keys}
    by_stored = {sessions.stored_key(key): key for key in session_keys}
    rows = (
        sessions.SessionStore.get_model_class()
        .objects.filter(session_key__in=list(by_stored), expire_date__gt=timezone.now())
        .values_list("session_key", "session_data")
        .iterator()
    )
    signed = {by_stored[stored]: _user_signed_in(data) for stored, data in rows}
    return {key: signed.get(key) for key in session_keys}


@functools.lru_cache(maxsize=10_000)
def _user_signed_in(session_data: str) -> SignedIn:
    """What a stored session's data signs in, decoded once per distinct data (it is signed: the
    same data always decodes the same): thousands of sockets re-check every few seconds."""
    return _signed_in(sessions.SessionStore().decode(session_data))


def _signed_in(data: dict[str, Any]) -> SignedIn:
    user_id = data.get(SESSION_KEY)
    return None if user_id is None else (str(user_id), str(data.get(HASH_SESSION_KEY) or ""))


def _still_signed_in(signed: SignedIn, user: User) -> bool:
    """Whether the session still signs this user in, as django.contrib.auth.get_user decides
    for a page: the same user, and the hash of the password it was signed in with (a
    password change ends every other session; SECRET_KEY_FALLBACKS still verify)."""
    if signed is None or signed[0] != str(user.pk) or not signed[1]:
        return False
    if constant_time_compare(signed[1], user.get_session_auth_hash()):
        return True
    return any(constant_time_compare(signed[1], fallback) for fallback in user.get_session_auth_fallback_hash())


def recheck_listeners(reads: list["Read"]) -> tuple[set[str], dict["Read", Caller]]:
    """The login sessions that still sign their person in, and a Caller for each read whose
    person may still listen (signed in, an active member of the tenant)."""
    if not reads:
        return set(), {}
    signed = _signed_in_users({read.session_key for read in reads})
    memberships = {
        (m.user_id, m.tenant_id): m
        for m in Membership.objects.select_related("tenant", "user").filter(
            user_id__in={read.user_id for read in reads}, tenant_id__in={read.tenant_id for read in reads}
        )
    }
    users = {m.user_id: m.user for m in memberships.values()}
    missing = {read.user_id for read in reads} - set(users)
    if missing:  # no membership left: the user is still needed to tell 4401 from 4403
        users.update((user.pk, user) for user in User.objects.filter(pk__in=missing))
    sessions_of = {(read.session_key, read.user_id) for read in reads}  # a hash per session, not per socket
    signed_here = {
        key for key, user_id in sessions_of if user_id in users and _still_signed_in(signed[key], users[user_id])
    }
    callers: dict[Read, Caller] = {}
    for read in reads:
        membership = memberships.get((read.user_id, read.tenant_id))
        if read.session_key in signed_here and membership is not None and membership.user.is_active:
            caller = Caller(
                tenant=membership.tenant, user=membership.user, session=web_session_for_key(read.session_key)
            )
            caller.__dict__["role"] = membership.role  # Caller.role, as it would read it
            callers[read] = caller
    return signed_here, callers
