"""Who may listen on the pages' websocket: the connect's checks, what a login session still
signs in (as a page would decide), and the close codes that say why a socket stopped
listening."""

import functools
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.base import SessionBase
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from runs.domain import selectors
from runs.identity import sessions
from runs.identity.callers import Caller
from runs.identity.visibility import viewer_of
from runs.models import Membership

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


def signed_in_users(session_keys: set[str]) -> dict[str, SignedIn]:
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


def still_signed_in(signed: SignedIn, user: User) -> bool:
    """Whether the session still signs this user in, as django.contrib.auth.get_user decides
    for a page: the same user, and the hash of the password it was signed in with (a
    password change ends every other session; SECRET_KEY_FALLBACKS still verify)."""
    if signed is None or signed[0] != str(user.pk) or not signed[1]:
        return False
    if constant_time_compare(signed[1], user.get_session_auth_hash()):
        return True
    return any(constant_time_compare(signed[1], fallback) for fallback in user.get_session_auth_fallback_hash())
