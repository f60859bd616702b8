"""`python -m bench …`: the benchmarks on the configured database (bin/bench gives them a
scratch one)."""

import os
import sys

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harbor_site.settings")
    django.setup()
    from bench.cli import main as run  # needs the app registry

    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
