"""Shared fixtures: demo-shaped tenants and people, callers, and a manual runtime."""

import os

import pytest

from runs.domain import push
from runs.identity.callers import Caller, caller_resolve
from runs.models import Role
from tests.factories import MembershipFactory, TenantFactory

POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")
REDIS = bool(os.environ.get("REDIS_URL"))
requires_postgres = pytest.mark.skipif(not POSTGRES, reason="needs PostgreSQL: set DATABASE_URL (the CI's second pass)")
requires_redis = pytest.mark.skipif(
    not REDIS, reason="needs Redis and a Celery worker: set REDIS_URL (the CI's second pass)"
)


def pytest_addoption(parser):
    parser.addoption(
        "--harbor-require-services",
        action="store_true",
        help="fail instead of skipping when PostgreSQL/Redis are not configured",
    )


def pytest_configure(config):
    if config.getoption("--harbor-require-services") and not (POSTGRES and REDIS):
        raise pytest.UsageError("--harbor-require-services needs DATABASE_URL (PostgreSQL) and REDIS_URL")


@pytest.fixture(autouse=True)
def _manual_runtime(settings):
    """Nothing advances runs behind a test's back: tests drive the runtime themselves."""
    settings.HARBOR_EXECUTOR = "manual"
    settings.HARBOR_TICK_SECONDS = 0
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed only
    # The sign-in lockout needs the request, which the test client's login() does not pass;
    # tests/runs/test_login_security.py turns it on and signs in through the page.
    settings.AXES_ENABLED = False
    push._push_paused_until = 0.0  # an earlier test's failed push pauses no one else's


class People:
    """acme: alice (member), bob (approver), olivia (operator), ada (admin);
    globex: gina (member)."""

    def __init__(self) -> None:
        self.acme = TenantFactory.create(slug="acme", name="Acme")
        self.globex = TenantFactory.create(slug="globex", name="Globex")
        for tenant, name, role in [
            (self.acme, "alice", Role.MEMBER),
            (self.acme, "bob", Role.APPROVER),
            (self.acme, "olivia", Role.OPERATOR),
            (self.acme, "ada", Role.ADMIN),
            (self.acme, "mallory", Role.MEMBER),
            (self.globex, "gina", Role.MEMBER),
        ]:
            MembershipFactory.create(tenant=tenant, user__username=name, role=role)  # password: <name>-password

    def caller(self, user: str, session: str = "s1", *, tenant: str | None = None, scopes=()) -> Caller:
        tenant = tenant or ("globex" if user == "gina" else "acme")
        return caller_resolve(tenant=tenant, user=user, session=session, scopes=scopes)


@pytest.fixture
def people(db) -> People:
    return People()


@pytest.fixture
def people_tx(transactional_db) -> People:
    return People()


# --- Runtime helpers --------------------------------------------------------------------------
import threading  # noqa: E402
from datetime import timedelta  # noqa: E402

from runs.runtime.planner import CallTool, Finish  # noqa: E402
from runs.runtime.registry import Agent, register_agent, unregister_agent  # noqa: E402
from runs.runtime.tools import Tool  # noqa: E402
from tests.live import live_harbor  # noqa: E402,F401  (the shared live-server fixture)
from tests.oauth_live import live_provider, oauth_harbor  # noqa: E402,F401  (the demo OAuth provider, live)


class GatedProbe:
    """A test agent `probe`: calls `launch` (gated, editable) then finishes. Counts how
    often the gated body really ran."""

    def __init__(self, deadline: timedelta | None = None) -> None:
        self.calls: list[dict] = []
        self._lock = threading.Lock()
        probe = self

        def launch(args, ctx):
            with probe._lock:
                probe.calls.append(dict(args))
            return {"launched": args["target"]}

        class Planner:
            def decide(self, view):
                if not view.history:
                    return CallTool("launch", {"target": "moon"})
                return Finish(f"launched {view.history[-1]['result']['launched']}")

        register_agent(
            Agent(
                id="probe",
                description="test",
                planner=Planner,
                tools={"launch": Tool("launch", launch, approval="always", editable_args=True, deadline=deadline)},
            )
        )


@pytest.fixture
def probe():
    yield GatedProbe()
    unregister_agent("probe")


@pytest.fixture
def expiring_probe():
    yield GatedProbe(deadline=timedelta(minutes=5))
    unregister_agent("probe")


def db_snapshot() -> dict:
    """Every domain row, for asserting that a refused call changed nothing."""
    from approvals.models import Pause
    from runs.models import Membership, Run, SteeringInstruction

    return {
        model.__name__: list(model.objects.order_by("pk").values())
        for model in (Run, Pause, SteeringInstruction, Membership)
    }


class OneCall:
    """A planner that calls `work` once, then finishes."""

    def decide(self, view):
        return Finish("done") if view.history else CallTool("work", {})


def one_call_agent(agent_id: str, body) -> None:
    """Register an agent whose planner calls its one tool, `work` (`body`), once."""
    register_agent(Agent(id=agent_id, description="test", planner=OneCall, tools={"work": Tool("work", body)}))
