"""No private name of a third-party library is touched outside compat.

An upgrade may rename or remove what a library keeps private, without notice: the product
would then break silently. Such a use belongs in the library's compat module, with the
versions it was checked against (tests/test_compat_versions.py).

The scan is a heuristic on the syntax tree of every module of the product's packages (not
tests, not migrations):

- an import of a private module or name of one of LIBRARIES (`from psycopg import _queries`,
  `import psycopg._queries`, `from django.x import _y`);
- an attribute whose name is in PRIVATE_ATTRIBUTES (names private to these libraries; a
  name the product also uses for its own is left out) or in CONNECTION_INTERNALS (Django's
  transaction state, public by spelling only), also through getattr/setattr/hasattr;
- except `self._x` / `cls._x` in a class of the product's own (no base imported from one of
  LIBRARIES): the product's own state.

Django's documented `_meta` and `_state` are public API despite their spelling."""

import ast
import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harbor_site", "runs", "approvals")
COMPAT = "compat/"
LIBRARIES = frozenset(
    {
        "django",
        "psycopg",
        "psycopg_pool",
        "redis",
        "channels",
        "channels_redis",
        "daphne",
        "twisted",
        "asgiref",
        "celery",
    }
)

# Private names of LIBRARIES, gathered from their sources (each is checked to be defined
# there below): what the product has reached for, and their neighbours.
PRIVATE_ATTRIBUTES = frozenset(
    {
        # django: connections, transactions, sessions, auth, querysets, handlers
        "_commit",
        "_rollback",
        "_close",
        "_cursor",
        "_savepoint",
        "_savepoint_commit",
        "_savepoint_rollback",
        "_savepoint_allowed",
        "_set_autocommit",
        "_prepare_cursor",
        "_nodb_cursor",
        "_connection_pools",
        "_session_key",
        "_session_cache",
        "_get_session_from_db",
        "_aget_session_from_db",
        "_get_new_session_key",
        "_get_or_create_session_key",
        "_get_session_auth_hash",
        "_result_cache",
        "_prefetch_related_lookups",
        "_known_related_objects",
        "_iterable_class",
        "_for_write",
        "_batched_insert",
        "_do_insert",
        "_do_update",
        "_save_table",
        "_raw_delete",
        "_filter_or_exclude",
        "_execute_with_wrappers",
        "_middleware_chain",
        "_view_middleware",
        "_exception_middleware",
        "_template_response_middleware",
        "_get_response_async",
        # psycopg, psycopg_pool
        "_pool",
        "_check",
        "_getconn_unchecked",
        "_return_connection",
        "_reset_connection",
        "_check_connection",
        "_nconns",
        "_adapters",
        "_tpc",
        "_pgconn",
        "_start_query",
        "_execute_gen",
        "_exec_command",
        # redis-py
        "_sock",
        "_parser",
        "_buffer",
        "_send_packed_command",
        "_read_response",
        "_checkpid",
        "_available_connections",
        "_in_use_connections",
        "_created_connections",
        "_host_error",
        # channels, channels_redis
        "_sync",
        "_get_layer",
        "_layers",
        "_shards",
        "_get_shard",
        "_get_group_channel_name",
        "_subscribe_to_channel",
        "_subscribed_to",
        "_receive_task",
        "_do_receiving",
        "_receive_message",
        "_ensure_redis",
        "_ensure_receiver",
        "_group_key",
        # daphne, twisted
        "_response_started",
        "_parsePOSTFormSubmission",
        "_respondToBadRequestAndDisconnect",
        "_path",
        "_command",
        "_transferDecoder",
        "_dataBuffer",
        "_handlingRequest",
        "_networkProducer",
        "_requestProducer",
        "_receivedHeaderCount",
        "_receivedHeaderSize",
        "_finishRequestBody",
        # asgiref, celery
        "_restore_context",
        "_get_current_object",
        "_get_app",
        "_producer_pool",
    }
)

# Django's connection state behind transaction.atomic and on_commit: public spelling,
# private contract (transaction.get_rollback/set_rollback, on_commit and atomic are the API).
CONNECTION_INTERNALS = frozenset(
    {"atomic_blocks", "run_on_commit", "savepoint_ids", "savepoint_state", "needs_rollback", "commit_on_exit"}
)

FLAGGED = PRIVATE_ATTRIBUTES | CONNECTION_INTERNALS
ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@dataclass(frozen=True)
class Touch:
    line: int
    what: str


def private_touches(source: str) -> list[Touch]:
    """Where `source` touches a private name of LIBRARIES, by the rules above."""
    tree = ast.parse(source)
    library_names = _library_names(tree)
    touches: list[Touch] = []

    def visit(node: ast.AST, own_class: bool) -> None:
        if isinstance(node, ast.ClassDef):
            bases = [_root(base) for base in node.bases]
            own_class = not any(base in library_names for base in bases)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pass  # a method keeps its class's ownership; a nested function its method's
        touches.extend(_touch(node, own_class))
        for child in ast.iter_child_nodes(node):
            visit(child, own_class if not isinstance(node, ast.Module) else False)

    for child in ast.iter_child_nodes(tree):
        visit(child, False)
    return sorted(touches, key=lambda touch: touch.line)


def _touch(node: ast.AST, own_class: bool) -> list[Touch]:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        if node.module.split(".")[0] not in LIBRARIES:
            return []
        if any(is_private(part) for part in node.module.split(".")):
            return [Touch(node.lineno, f"from {node.module} import …")]
        return [Touch(node.lineno, f"from {node.module} import {a.name}") for a in node.names if is_private(a.name)]
    if isinstance(node, ast.Import):
        return [
            Touch(node.lineno, f"import {a.name}")
            for a in node.names
            if a.name.split(".")[0] in LIBRARIES and any(is_private(part) for part in a.name.split("."))
        ]
    if isinstance(node, ast.Attribute) and node.attr in FLAGGED:
        on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        if on_self and own_class and node.attr not in CONNECTION_INTERNALS:
            return []
        return [Touch(node.lineno, f".{node.attr}")]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ATTRIBUTE_FUNCTIONS
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value in FLAGGED
    ):
        return [Touch(node.lineno, f"{node.func.id}(…, {node.args[1].value!r})")]
    return []


def _library_names(tree: ast.Module) -> set[str]:
    """The names a module binds to something imported from LIBRARIES."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in LIBRARIES:
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def _root(node: ast.expr) -> str:
    """The first name of a dotted expression (`db.SessionStore` → "db")."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else ""


def product_modules() -> list[str]:
    return sorted(
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    )


def scanned(path: str) -> bool:
    return not path.startswith(COMPAT)


def touches_in(path: str) -> list[Touch]:
    return private_touches((ROOT / path).read_text())


def test_no_private_name_of_a_library_is_touched_outside_compat():
    found = {path: touches for path in product_modules() if scanned(path) and (touches := touches_in(path))}
    assert not found, "\n".join(
        f"{path}:{touch.line}: {touch.what} (move it into {COMPAT}<library>.py, with the versions it was checked against)"
        for path, touches in found.items()
        for touch in touches
    )


@cache
def _library_private_names() -> frozenset[str]:
    names: set[str] = set()
    pattern = re.compile(r"(?:\bdef\s+|\bself\.|\bcls\.)(_[A-Za-z][A-Za-z0-9_]*)")
    for library in LIBRARIES:
        spec = importlib.util.find_spec(library)
        assert spec is not None and spec.submodule_search_locations, library
        for path in Path(next(iter(spec.submodule_search_locations))).rglob("*.py"):
            names.update(pattern.findall(path.read_text(errors="replace")))
    return frozenset(names)


def test_each_listed_private_attribute_is_one_a_library_defines():
    assert PRIVATE_ATTRIBUTES - _library_private_names() == set()


# The scanner itself, on code strings.


@pytest.mark.parametrize(
    "source",
    [
        "from psycopg import _queries",
        "import psycopg._queries",
        "from psycopg._queries import PostgresQuery",
        "from django.db.models.sql import _private_helper",
        "def publish(connection):\n    return connection._sock",
        "def f(pool):\n    pool._pool.clear()",
        "from django.db import connection\nconnection.atomic_blocks.append(1)",
        "def f(connection):\n    return connection.run_on_commit, connection.savepoint_ids",
        "def f(connection):\n    connection._commit()\n    connection._rollback()\n    connection._close()",
        "def init(self):\n    self._parsePOSTFormSubmission = False",
        "from django.contrib.sessions.backends import db\n"
        "class Store(db.SessionStore):\n    def load(self):\n        self._session_key = None",
        "def f(connection):\n    return getattr(connection, '_sock', None)",
    ],
)
def test_the_scanner_flags_a_private_name(source):
    assert private_touches(source), source


@pytest.mark.parametrize(
    "source",
    [
        "from django.db import transaction\ntransaction.on_commit(print)",
        "import redis\nredis.Redis().publish('a', b'b')",
        "class Mine:\n    def __init__(self):\n        self._pool = []\n    def size(self):\n        return len(self._pool)",
        "from runs.domain import events\nevents._push(1, [])",  # the product's own module
        "from django.db import models\nmodels.Model._meta",  # documented
        "def f(run):\n    return run._state.adding",  # documented
        "from . import _own",
    ],
)
def test_the_scanner_leaves_public_and_own_names_alone(source):
    assert private_touches(source) == [], source


def test_a_violation_fails_the_scan_of_a_product_module(tmp_path):
    """The check above, run on a module of the product with one private use added."""
    source = (ROOT / "runs/domain/pubsub.py").read_text()
    assert private_touches(source) == []
    broken = source + "\n\ndef _peek(client):\n    return client.connection._sock\n"
    assert [touch.what for touch in private_touches(broken)] == ["._sock"]
