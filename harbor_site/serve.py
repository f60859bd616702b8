"""`python -m harbor_site.serve`: Daphne, as its own command line takes it, with

- an access log that leaves out the values of `state` and `code` in a query string: the
  OAuth callback and the sign-in's begin address carry them, and a log is read by more
  people than a sign-in should be known to;
- PROTOCOL §7's JSON error for a request the HTTP server refuses before the application
  sees it (a malformed Content-Length, a request line or header past its limits): Twisted
  answered an empty 400, or dropped the connection without a word."""

import json
import re
from typing import Any

from daphne import cli, server
from daphne.access import AccessLogGenerator

from compat import twisted

SECRET_PARAMETER = re.compile(r"([?&](?:state|code)=)[^&#\s]*")


def redact_secrets(path: str) -> str:
    return SECRET_PARAMETER.sub(r"\1[redacted]", path)


class AccessLog(AccessLogGenerator):
    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        if isinstance(details.get("path"), str):
            details = {**details, "path": redact_secrets(details["path"])}
        super().__call__(protocol, action, details)


class Server(server.Server):
    """Daphne's server, logging through AccessLog: the command line builds its access log
    and hands it to the server it names (`server_class`, Daphne's hook for this)."""

    def __init__(self, *args: Any, action_logger: Any = None, **kwargs: Any) -> None:
        if isinstance(action_logger, AccessLogGenerator) and not isinstance(action_logger, AccessLog):
            action_logger = AccessLog(action_logger.stream)
        super().__init__(*args, action_logger=action_logger, **kwargs)


class CommandLine(cli.CommandLineInterface):
    server_class = Server


MALFORMED = json.dumps(
    {"code": "invalid_request", "message": "malformed HTTP request (its request line, headers or framing)"}
).encode()


def refuse_malformed(channel: Any, *line: bytes) -> None:  # an HTTPChannel
    head = f"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {len(MALFORMED)}\r\n"
    channel.transport.write(f"{head}Connection: close\r\n\r\n".encode() + MALFORMED)
    channel.loseConnection()


def main() -> None:
    twisted.answer_bad_requests(refuse_malformed)
    CommandLine.entrypoint()


if __name__ == "__main__":
    main()
