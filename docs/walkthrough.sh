#!/usr/bin/env bash
# Run docs/protocol-walkthrough.md: every ```bash block of the page, in order, as one script,
# against a running server ($HARBOR, default http://127.0.0.1:8000, e.g. started by bin/run).
# Run it from anywhere; it works in the repository root, where manage.py mints the tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
script=$(awk '/^```bash$/ {inside = 1; next} /^```$/ {inside = 0} inside' docs/protocol-walkthrough.md)
[ -n "$script" ] || { echo "no bash blocks found in docs/protocol-walkthrough.md" >&2; exit 1; }
exec bash -euo pipefail -c "$script"
