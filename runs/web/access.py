"""What every page shares: who the signed-in person is (the identity triple the services act
for, from their login session and the tenant they chose), the member-only decorator, and
plain words for refusals."""

from collections.abc import Callable
from functools import wraps
from typing import Concatenate, ParamSpec, cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme

from runs.domain import push, selectors
from runs.identity.callers import Caller, caller_resolve
from runs.identity.sessions import PAGES_SESSION, login_label
from runs.kernel.errors import HarborError
from runs.models import Membership


def web_caller(request: HttpRequest) -> Caller | None:
    membership = selectors.membership_for_user(user=request.user, session=request.session)
    if membership is None:
        return None
    try:
        return caller_resolve(
            tenant=membership.tenant.slug,
            user=request.user.username,
            session=PAGES_SESSION,  # the person's, on every login: her own pauses stay hers
            address=request.META.get("REMOTE_ADDR"),
            provision=False,
        )
    except HarborError:
        return None


P = ParamSpec("P")


class SignedInRequest(HttpRequest):
    """A request `login_required` let through."""

    user: User


class MemberRequest(SignedInRequest):
    """A request `member_required` let through: signed in, a member, its caller resolved."""

    caller: Caller
    memberships: list[Membership]


def member_required(
    view: Callable[Concatenate[MemberRequest, P], HttpResponse],
) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
    """Signed in and a member of a tenant: the view gets `request.caller`."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        caller = web_caller(request)
        if caller is None:
            return render(request, "no_membership.html", status=403)
        shown = request.headers.get("X-Harbor-Tenant")
        if shown and shown != caller.tenant.slug:  # a page's fetch, its tenant switched in another tab
            return HttpResponse("This session now works in another tenant: reload.", status=409)
        member = cast(MemberRequest, request)  # what this decorator makes of it, just below
        member.caller = caller
        member.memberships = selectors.memberships_of(user=member.user)
        return view(member, *args, **kwargs)

    return wrapper


def error_text(error: HarborError) -> str:
    """A domain error in plain words for a page."""
    plain = {
        "already_resumed": "Already decided: ",
        "scope_mismatch": "Not allowed: ",
        "identity_scope_required": "Not allowed: ",
        "not_found": "Not found: ",
        "invalid_request": "Not accepted: ",
        "payload_invalid": "Not accepted: ",
    }
    return plain.get(error.code, "Refused: ") + error.message


def safe_next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


@receiver(user_logged_out, dispatch_uid="harbor-close-streams-on-logout")
def _close_on_logout(sender: type, request: HttpRequest, user: User | None, **kwargs: object) -> None:
    """A logout closes the websockets of that login session only (its login_label): the
    person's other logins stay open, though they act for the same session element."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if user is not None and session_key:
        push.close_streams(user_id=user.pk, login=login_label(session_key))


@receiver(post_save, sender=User, dispatch_uid="harbor-recheck-streams-on-password-change")
def _recheck_on_password_change(sender: type, instance: User, **kwargs: object) -> None:
    """A new password signs the person's other login sessions out (their session keeps the
    old password's hash): their websockets are re-checked at once, not at their next
    periodic re-check, and close; the session that changed it stays signed in."""
    if getattr(instance, "_password", None) is not None:  # set_password, saved now (AbstractBaseUser.save)
        user_id = instance.pk
        transaction.on_commit(lambda: push.close_streams(user_id=user_id))
