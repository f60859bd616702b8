"""The OAuth client, with authlib: the authorization URL with PKCE (S256), the code
exchange, the refresh, and the revocation. Every provider failure becomes one of two
errors: the provider refused (ProviderRefused) or could not be reached (ProviderDown)."""

from typing import Any

import requests
from authlib.common.security import generate_token
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.requests_client import OAuth2Session

from .sources import Source

TIMEOUT_SECONDS = 10


class ProviderRefused(Exception):
    """The provider answered, and said no (a wrong client secret, a used code)."""


class ProviderDown(Exception):
    """The provider could not be reached, or answered with a server error."""


def _session(source: Source, **kwargs: Any) -> OAuth2Session:
    return OAuth2Session(
        client_id=source.client_id,
        client_secret=source.client_secret,
        scope=" ".join(source.scopes),
        code_challenge_method="S256",
        token_endpoint_auth_method="client_secret_post",
        **kwargs,
    )


def new_verifier() -> str:
    return generate_token(64)  # RFC 7636: 43 to 128 characters


def authorization_url(source: Source, *, state: str, verifier: str, redirect_uri: str) -> str:
    url, _ = _session(source, redirect_uri=redirect_uri).create_authorization_url(
        source.authorize_url, state=state, code_verifier=verifier
    )
    return url


def _call(fn: Any, *args: Any, **kwargs: Any) -> dict:
    try:
        token = dict(fn(*args, timeout=TIMEOUT_SECONDS, **kwargs))
    except OAuthError as error:
        raise ProviderRefused(f"{error.error}: {error.description or ''}".strip(": ")) from None
    except requests.RequestException as error:
        raise ProviderDown(f"the provider could not be reached ({type(error).__name__})") from None
    except ValueError as error:  # a body that is not a token response (an HTML error page)
        raise ProviderDown(f"the provider gave no token response ({error})") from None
    if not isinstance(token.get("access_token"), str) or not token["access_token"]:
        raise ProviderDown("the provider's token response has no access token")
    return token


def exchange_code(source: Source, *, code: str, verifier: str, redirect_uri: str) -> dict:
    """Trade an authorization code for tokens."""
    session = _session(source, redirect_uri=redirect_uri)
    return _call(
        session.fetch_token, source.token_url, code=code, code_verifier=verifier, grant_type="authorization_code"
    )


def refresh(source: Source, refresh_token: str) -> dict:
    return _call(_session(source).refresh_token, source.token_url, refresh_token=refresh_token)


def revoke(source: Source, token: str) -> None:
    """Best effort: ask the provider to forget a token (RFC 7009)."""
    if not source.revoke_url:
        return
    try:
        _session(source).revoke_token(source.revoke_url, token=token, timeout=TIMEOUT_SECONDS)
    except (OAuthError, requests.RequestException):
        pass


def api_get(source: Source, path: str, access_token: str) -> requests.Response:
    """GET `path` of the source's API with a bearer token (ProviderDown if unreachable)."""
    try:
        return requests.get(
            source.api_base_url.rstrip("/") + path,
            headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
            timeout=TIMEOUT_SECONDS,
        )
    except requests.RequestException as error:
        raise ProviderDown(f"the provider's API could not be reached ({type(error).__name__})") from None
