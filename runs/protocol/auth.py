"""The /v1 side of identity (PROTOCOL §1): the bearer token and session header of a request
become a Caller; every failure is 401 before any service runs."""

import logging
from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from runs.identity.bearer_tokens import token_verify
from runs.identity.callers import Caller, caller_resolve
from runs.identity.issuers import SESSION_HEADER, SESSION_PATTERN
from runs.identity.sessions import PAGES_SESSION
from runs.kernel.errors import AuthRejected, IdentityRequired

log = logging.getLogger("harbor.auth")

# --- Requests -----------------------------------------------------------------------------


def client_address(meta: Mapping[str, Any]) -> str | None:
    return meta.get("REMOTE_ADDR") or None


def bearer_token(authorization: bytes | str) -> str | None:
    """The token of an `Authorization: Bearer …` header; None when there is no header."""
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthRejected("use Authorization: Bearer <JWT>")
    return token.strip()


def caller_from_headers(meta: Mapping[str, Any]) -> Caller:
    """The verified caller of a request, from its WSGI/ASGI META. Raises IdentityRequired or
    AuthRejected; never infers identity from anything but the verified token."""
    token = bearer_token(meta.get("HTTP_AUTHORIZATION", ""))
    if token is None:
        raise IdentityRequired("send Authorization: Bearer <JWT>")
    claims = token_verify(token)
    session = meta.get(SESSION_HEADER)
    if session is not None and session != "":
        if not SESSION_PATTERN.match(session):
            raise IdentityRequired("X-Harbor-Session must be 1 to 128 printable characters without spaces")
        if session == PAGES_SESSION:  # the pages' own: it would hold a person's sign-ins and answers
            raise IdentityRequired(f"the session {PAGES_SESSION!r} belongs to the web pages; choose another")
    else:
        session = claims.session
    if not session:
        raise IdentityRequired("no session: send X-Harbor-Session or a token with a session claim")
    return caller_resolve(
        tenant=claims.tenant,
        user=claims.user,
        session=session,
        scopes=claims.scopes,
        address=client_address(meta),
        namespace=claims.namespace,
    )


class BearerAuthentication(BaseAuthentication):
    """DRF authentication: `request.user` is the Django user, `request.auth` the Caller."""

    def authenticate(self, request: Request) -> tuple[User, Caller] | None:
        if not get_authorization_header(request):
            return None
        caller = caller_from_headers(request.META)
        return caller.user, caller

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="harbor"'
