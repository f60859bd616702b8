"""A database session store that keeps no usable session key (SESSION_ENGINE).

Django's own store uses the cookie's key as the row's primary key, so a copy of
`django_session` is a bag of live logins — enough to approve a pause. Here the row is keyed
by a digest of the key: the cookie still finds its row, a row never yields a cookie. The
key is ~165 random bits, so a plain SHA-256 (not an HMAC with SECRET_KEY) is enough, and a
SECRET_KEY rotation does not sign everybody out."""

import hashlib
from typing import Any

from django.contrib.sessions.backends import db
from django.contrib.sessions.base_session import AbstractBaseSession
from django.core.exceptions import SuspiciousOperation
from django.db.models import QuerySet
from django.utils import timezone

from compat import django


def stored_key(session_key: str) -> str:
    """What the database keeps for a session key (fits the 40-character column)."""
    return hashlib.sha256(b"harbor.session:" + session_key.encode()).hexdigest()[:40]


class SessionStore(db.SessionStore):
    def _row(self) -> QuerySet[AbstractBaseSession]:
        if self.session_key is None:  # Django loads only with a key; stay total anyway
            return self.model.objects.none()
        return self.model.objects.filter(session_key=stored_key(self.session_key), expire_date__gt=timezone.now())

    def load(self) -> dict[str, Any]:
        try:
            return self.decode(self._row().get().session_data)
        except (self.model.DoesNotExist, SuspiciousOperation):
            django.forget_session_key(self)  # a save makes a new session, not one under this key
            return {}

    async def aload(self) -> dict[str, Any]:
        try:
            return self.decode((await self._row().aget()).session_data)
        except (self.model.DoesNotExist, SuspiciousOperation):
            django.forget_session_key(self)
            return {}

    def exists(self, session_key: str) -> bool:
        return super().exists(stored_key(session_key))

    async def aexists(self, session_key: str) -> bool:
        return await super().aexists(stored_key(session_key))

    def create_model_instance(self, data: dict[str, Any]) -> AbstractBaseSession:
        obj = super().create_model_instance(data)
        obj.session_key = stored_key(obj.session_key)
        return obj

    async def acreate_model_instance(self, data: dict[str, Any]) -> AbstractBaseSession:
        obj = await super().acreate_model_instance(data)
        obj.session_key = stored_key(obj.session_key)
        return obj

    def delete(self, session_key: str | None = None) -> None:
        session_key = session_key or self.session_key
        if session_key is not None:
            self.model.objects.filter(session_key=stored_key(session_key)).delete()

    async def adelete(self, session_key: str | None = None) -> None:
        session_key = session_key or self.session_key
        if session_key is not None:
            await self.model.objects.filter(session_key=stored_key(session_key)).adelete()


# The session element of the identity triple the pages act with: the same on every login and
# device, so a person's own pauses (a sign-in, a remote agent's question) stay hers after
# she signs in again. A bearer token may not claim it (bearer_tokens, protocol.auth).
PAGES_SESSION = "pages"


def login_label(session_key: str) -> str:
    """A name for one login session (whose websockets a logout closes), derived from (never
    equal to) its key, so what crosses the channel layer never carries the cookie's secret."""
    return "login-" + hashlib.sha256(session_key.encode()).hexdigest()[:12]
