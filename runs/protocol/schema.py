"""drf-spectacular hooks: the bearer scheme, the registered agents and GET /v1/events."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from runs.runtime.registry import all_agents


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
    """drf-spectacular hook: the agents registered in this deployment, and GET /v1/events
    (an async view outside DRF)."""
    start = result.get("components", {}).get("schemas", {}).get("StartRequest", {}).get("properties", {})
    if "agent_id" in start:
        start["agent_id"]["enum"] = [agent.id for agent in all_agents()]
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    header = lambda name, description, schema: {  # noqa: E731
        "in": "header",
        "name": name,
        "required": False,
        "description": description,
        "schema": schema,
    }
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
                header("X-Harbor-Run", "Only this run's events.", {"type": "string"}),
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
                "404": {"description": "not_found (X-Harbor-Run unknown or not visible)", "content": error},
            },
        }
    }
    return result
