"""The project's modules import each other without cycles: counting imports inside functions
too, since a cycle hidden in a function is still a cycle. The same holds one level up, between
the packages the layers name (pyproject.toml, [tool.importlinter]; lint-imports checks their
order)."""

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harbor_site", "runs", "approvals", "notifications", "outbox", "compat")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    files = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts]
    modules = {module_name(p): p for p in files}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_the_sources():
    graph = import_graph()
    assert "runs.runtime.loop" in graph["runs.runtime.dispatch"]  # a sanity check that edges are found
    assert "runs.models" in graph["approvals.models"]


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def layers_contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return contract


def layer_packages() -> list[str]:
    """The packages the layers contract names (a line such as "runs.web | runs.protocol"
    names two)."""
    return [name.strip() for line in layers_contract()["layers"] for name in line.split("|")]


def package_graph() -> dict[str, set[str]]:
    """Modules folded into the layer package holding them; a module outside every layer (an
    app's models, admin or apps module) stays a node of its own."""
    packages = sorted(layer_packages(), key=len, reverse=True)

    def node(module: str) -> str:
        return next((p for p in packages if module == p or module.startswith(p + ".")), module)

    ignored = {tuple(rule.replace(" ", "").split("->")) for rule in layers_contract().get("ignore_imports", [])}
    folded: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        kept = [t for t in targets if (module, t) not in ignored and node(t) != node(module)]
        folded.setdefault(node(module), set()).update(node(t) for t in kept)
    return folded


def test_every_product_package_sits_in_a_layer():
    graph = package_graph()
    packages = {p for p in graph if (ROOT / p.replace(".", "/") / "__init__.py").exists()}
    unplaced = {p for p in packages if p not in layer_packages() and not p.endswith(("migrations", "commands"))}
    assert unplaced <= {"runs", "approvals", "outbox", "harbor_site", "runs.management", "approvals.management"}


def test_no_cycle_between_packages():
    assert cycles(package_graph()) == []
