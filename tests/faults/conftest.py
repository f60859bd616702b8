"""One fault topology for the whole tests/faults suite (starting one costs ~20 s): two
Daphnes, two Celery workers, a beat and a redis-server of its own. A test that kills a
process restarts it; if it failed before doing so, the next test still finds every
process running. HARBOR_FAULTS_KEEP=1 keeps the processes' logs for a post-mortem."""

import pytest

from .topology import Topology


@pytest.fixture(scope="session")
def topology():
    topo = Topology(daphnes=2, workers=2)
    try:
        topo.start()
        yield topo
    finally:
        topo.stop()


@pytest.fixture(autouse=True)
def _every_process_running(request):
    yield
    if "topology" in request.fixturenames:
        topo = request.getfixturevalue("topology")
        for name, proc in list(topo.procs.items()):
            if proc.poll() is not None:
                topo.start_process(name)
