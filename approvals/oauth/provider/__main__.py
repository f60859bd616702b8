"""`python -m approvals.oauth.provider <command>`: manage.py for the demo provider, plus
`serve [--port N]`, which runs it under Daphne on 127.0.0.1."""

import os
import sys


def main(argv: list[str]) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "approvals.oauth.provider.settings"
    if argv[1:2] == ["serve"]:
        port = (
            argv[argv.index("--port") + 1] if "--port" in argv else os.environ.get("HARBOR_OAUTH_PROVIDER_PORT", "8001")
        )
        from daphne.cli import CommandLineInterface

        CommandLineInterface().run(["-b", "127.0.0.1", "-p", port, "approvals.oauth.provider.asgi:application"])
        return
    from django.core.management import execute_from_command_line

    execute_from_command_line(argv)


if __name__ == "__main__":
    main(sys.argv)
