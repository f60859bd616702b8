"""`python -m harbor_site.serve`: Daphne, as its own command line takes it, with an access log
that leaves out the values of `state` and `code` in a query string. The OAuth callback and
the sign-in's begin address carry them, and a log is read by more people than a sign-in
should be known to."""

import re
from typing import Any

from daphne import cli
from daphne.access import AccessLogGenerator

SECRET_PARAMETER = re.compile(r"([?&](?:state|code)=)[^&#\s]*")


def redacted(path: str) -> str:
    return SECRET_PARAMETER.sub(r"\1[redacted]", path)


class AccessLog(AccessLogGenerator):
    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        if isinstance(details.get("path"), str):
            details = {**details, "path": redacted(details["path"])}
        super().__call__(protocol, action, details)


def main() -> None:
    cli.AccessLogGenerator = AccessLog  # the one the command line builds
    cli.CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
