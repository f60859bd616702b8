"""The OAuth client: the authorization URL with PKCE (S256, composed by authlib), and the
calls to the provider's token endpoint (code exchange, refresh), revocation endpoint and
API, made here with httpx. A provider is someone else's server: every call to it is bounded in
time and size (approvals.oauth.bounded) and in number (slots), and its token answers are
checked before use (token_answer). Every provider failure becomes one of two errors: the
provider refused (ProviderRefused) or gave nothing usable (ProviderDown, with its kinds:
too many calls at once, an unusable answer)."""

import json
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session

from .bounded import AnswerTooLarge, DeadlinePassed, client_options, within_deadline
from .slots import ProviderBusy, provider_slot
from .sources import Source
from .token_answer import UnusableAnswer, checked_token

# How much of a provider's own words an error quotes (they are shown and logged).
_QUOTED = 200


class ProviderRefused(Exception):
    """The provider answered, and said no (a wrong client secret, a used code)."""


class ProviderDown(Exception):
    """The provider could not be reached in time, or answered with a server error."""


class ProviderSwamped(ProviderDown):
    """Harbor already makes as many provider calls as it allows at once."""


class ProviderUnusable(ProviderDown):
    """The provider answered with something Harbor cannot keep (too large, malformed)."""


def new_verifier() -> str:
    return generate_token(64)  # RFC 7636: 43 to 128 characters


def authorization_url(source: Source, *, state: str, verifier: str, redirect_uri: str) -> str:
    """The provider's authorize address for a sign-in (composed here: no call is made)."""
    session = OAuth2Session(
        client_id=source.client_id,
        scope=" ".join(source.scopes),
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
    )
    url, _ = session.create_authorization_url(source.authorize_url, state=state, code_verifier=verifier)
    return url


def _client_credentials(source: Source) -> dict[str, str]:
    # RFC 6749 2.3.1: the client authenticates in the form body (client_secret_post).
    return {"client_id": source.client_id, "client_secret": source.client_secret}


def _send(method: str, url: str, **request: Any) -> tuple[int, bytes]:
    """One request to the provider within its slot, deadline and cap: status and body."""

    async def call() -> tuple[int, bytes]:
        async with httpx.AsyncClient(**client_options()) as http:
            answer = await http.request(method, url, **request)
            return answer.status_code, answer.content

    try:
        with provider_slot(url):
            return within_deadline(call)
    except ProviderBusy as busy:
        raise ProviderSwamped(str(busy)) from None
    except DeadlinePassed as late:
        raise ProviderDown(str(late)) from None
    except AnswerTooLarge as large:
        raise ProviderUnusable(str(large)) from None
    except httpx.HTTPError as error:
        raise ProviderDown(f"the provider could not be reached ({type(error).__name__})") from None


def _post(url: str, form: dict[str, str]) -> tuple[int, bytes]:
    return _send("POST", url, data=form, headers={"Accept": "application/json"})


def _parsed(body: bytes) -> Any:
    try:
        return json.loads(body)
    except RecursionError:
        raise ProviderUnusable("the provider's answer is nested too deeply") from None
    except ValueError:  # not JSON (an HTML error page), or not UTF-8
        return None


def _token_answer(status: int, body: bytes) -> dict:
    """A token endpoint's answer (RFC 6749 5.1, 5.2) as checked tokens, or our errors."""
    answer = _parsed(body)
    if isinstance(answer, dict) and "error" in answer:
        said = f"{answer['error']}: {answer.get('error_description') or ''}".strip(": ")
        raise ProviderRefused(said[:_QUOTED])
    if status >= 500:
        raise ProviderDown(f"the provider answered {status}")
    if status != 200 or answer is None:
        raise ProviderUnusable(f"the provider gave no token response (HTTP {status})")
    try:
        return checked_token(answer)
    except UnusableAnswer as unusable:
        raise ProviderUnusable(str(unusable)) from None


def exchange_code(source: Source, *, code: str, verifier: str, redirect_uri: str) -> dict:
    """Trade an authorization code for tokens (checked: token_answer.checked_token)."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
        **_client_credentials(source),
    }
    return _token_answer(*_post(source.token_url, form))


def refresh(source: Source, refresh_token: str) -> dict:
    """New tokens for a refresh token (checked: token_answer.checked_token)."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, **_client_credentials(source)}
    return _token_answer(*_post(source.token_url, form))


def revoke(source: Source, token: str) -> None:
    """Best effort: ask the provider to forget a token (RFC 7009)."""
    if not source.revoke_url:
        return
    try:
        _post(source.revoke_url, {"token": token, **_client_credentials(source)})
    except ProviderDown:
        pass


@dataclass(frozen=True)
class ApiAnswer:
    """A source's API answer, read whole within the same bounds as any provider call."""

    status_code: int
    body: bytes

    def json(self) -> Any:
        answer = _parsed(self.body)
        if answer is None:
            raise ProviderUnusable("the provider's API answered no JSON")
        return answer


def api_get(source: Source, path: str, access_token: str) -> ApiAnswer:
    """GET `path` of the source's API with a bearer token (ProviderDown if unreachable)."""
    headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json"}
    return ApiAnswer(*_send("GET", source.api_base_url.rstrip("/") + path, headers=headers))
