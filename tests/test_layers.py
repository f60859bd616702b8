"""The layer contracts (pyproject.toml, [tool.importlinter]) hold, and each upward import they
exist to stop fails them: a copy of the sources with one such import added is checked by
lint-imports, as bin/test checks the real tree."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harbor_site", "runs", "approvals", "notifications", "outbox", "compat")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_layers_hold(sources):
    answer = lint_imports(sources)
    assert answer.returncode == 0, answer.stdout


@pytest.mark.parametrize(
    "module, line, contract",
    [
        ("runs/domain/transitions.py", "from runs.runtime import wake", "Layers"),  # the domain drives the runtime
        ("approvals/domain/decide.py", "from approvals.a2a import answers", "Layers"),  # the core calls a cause
        ("runs/models.py", "from runs.domain import events", "Models import nothing above them"),
        ("runs/identity/callers.py", "from harbor_site import urls", "Layers"),  # identity reaches the site
        ("runs/web/views.py", "from runs.protocol import views", "siblings"),
        ("runs/protocol/views.py", "from runs.runtime import dispatch", "only through the application"),
        ("approvals/causes.py", "from approvals.domain import decide", "Models import nothing above them"),
    ],
)
def test_an_upward_import_breaks_a_contract(sources, module, line, contract):
    path = sources / module
    original = path.read_text()
    try:
        path.write_text(original + f"\n{line}  # noqa\n")
        answer = lint_imports(sources)
    finally:
        path.write_text(original)
    assert answer.returncode != 0
    broken = answer.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken and line.split()[1] in broken, answer.stdout
