"""drf-spectacular hooks: the bearer scheme, the registered agents and GET /v1/events."""

from functools import partial
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from runs.application.catalog import agents_offered


class BearerScheme(OpenApiAuthenticationExtension):
    target_class = "runs.protocol.auth.BearerAuthentication"
    name = "HarborBearer"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "A JWT signed with RS256/384/512 or ES256/384/512 by a key trusted for its issuer; claims iss, aud, tenant, "
            "user, session, scopes, exp. `X-Harbor-Session` replaces the session claim. "
            "Locally: `python manage.py harbor_token --tenant acme --user alice --session s1`.",
        }


def document_protocol(result: dict[str, Any], generator: object, request: object, public: bool) -> dict[str, Any]:
    """drf-spectacular hook: closed filter objects, the agents registered in this deployment,
    GET /v1/events (an async view outside DRF) and the OAuth callback (a page, also outside DRF)."""
    schemas = result.get("components", {}).get("schemas", {})
    for name in ("PauseFilter", "TaskFilter"):  # they refuse a key they do not have (FilterSerializer)
        if name in schemas:
            schemas[name]["additionalProperties"] = False
    start = schemas.get("StartRequest", {}).get("properties", {})
    if "agent_id" in start:
        start["agent_id"]["enum"] = [agent.id for agent in agents_offered()]
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    header = partial(_parameter, "header")
    result.setdefault("paths", {})["/v1/events"] = {
        "get": {
            "operationId": "events_stream",
            "summary": "The event stream (Server-Sent Events)",
            "description": (
                "Frames `event: <type>`, `id: <sequence>`, `data: <envelope JSON>`; opens with `retry: 3000`, "
                "a `: keepalive` comment every ~15 s. Filtered on the server to the runs the caller may see."
            ),
            "tags": ["events"],
            "security": [{"HarborBearer": []}],
            "parameters": [
                header(
                    "Last-Event-ID",
                    "Replay every retained event after this sequence, then tail live.",
                    {"type": "string", "pattern": "^[0-9]{1,18}$"},
                ),
                header(
                    "X-Harbor-Run",
                    "Only this run's events (one the caller cannot see yields none: 200, never 404).",
                    {"type": "string"},
                ),
                header("X-Harbor-Event-Type", "Only these event types (comma-separated).", {"type": "string"}),
                header("X-Harbor-Session", "Replaces the token's session claim.", {"type": "string"}),
                {
                    "in": "query",
                    "name": "admin",
                    "required": False,
                    "schema": {"type": "string", "enum": ["1"]},
                    "description": "Tenant-wide (needs the admin scope).",
                },
            ],
            "responses": {
                "200": {
                    "description": "An endless text/event-stream.",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                "400": {"description": "invalid_request", "content": error},
                "401": {"description": "identity_required, auth_rejected", "content": error},
                "403": {"description": "identity_scope_required (?admin=1 without admin)", "content": error},
            },
        }
    }
    result["paths"]["/v1/tools/oauth/callback"] = _oauth_callback(error)
    return result


def _parameter(
    where: str, name: str, description: str, schema: dict[str, Any] | None = None, *, required: bool = False
) -> dict[str, Any]:
    return {
        "in": where,
        "name": name,
        "required": required,
        "description": description,
        "schema": schema or {"type": "string"},
    }


def _oauth_callback(error: dict[str, Any]) -> dict[str, Any]:
    """PROTOCOL §6: the provider's redirect back, in the signed-in person's browser: a
    page, or JSON for a request that asks for it."""
    error = {"text/html": {"schema": {"type": "string"}}, **error}
    query = partial(_parameter, "query")
    return {
        "get": {
            "operationId": "oauth_callback",
            "summary": "The OAuth provider's redirect back (a page)",
            "description": (
                "Completes a tool's sign-in: the one-time `state` names the flow, bound to the pausing identity "
                "(the Harbor login session of the browser) and its pause; the code is exchanged with PKCE (S256). "
                "Answers a browser (which asks for text/html) with a page, any other client with JSON."
            ),
            "tags": ["oauth"],
            "security": [],  # no bearer token: the browser's Harbor login session
            "parameters": [
                query("state", "The flow's one-time state.", required=True),  # and one of code or error
                query("code", "The authorization code (unless `error`)."),
                query("error", "The provider's error (access_denied: the person refused)."),
            ],
            "responses": {
                "200": {
                    "description": "authorization complete: the pause resumes and the tool call proceeds",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                },
                "400": {"description": "invalid_request, state_mismatch, authorization_denied", "content": error},
                "401": {"description": "identity_required (no Harbor login in this browser)", "content": error},
                "404": {"description": "flow_not_found (unknown state, or a replayed callback)", "content": error},
                "410": {"description": "flow_expired", "content": error},
                "502": {"description": "exchange_failed", "content": error},
            },
        }
    }
