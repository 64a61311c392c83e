"""Fixtures of the real-cluster tests: `aitax cluster` (containerd, kubelet, kube-proxy, CoreDNS on this machine),
the images built here and loaded into it, and one release of the chart installed with its DEFAULTS.

The cluster is started for the session and stopped at its end (unless it was already running: a developer's cluster
is left as found); the session then checks that `down` left nothing behind.

The images build in the background from the end of collection, while the tests collected before these run. In
`make test` they start earlier still, with the unit tests, at the lowest CPU priority, after the node's tools
(scripts/test.sh): the build here then waits for that one (cluster.images takes a lock on its store) and finds the
images built. Either way the cluster fixture waits for the build.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aitax.cluster import images
from aitax.cluster.control_plane import tool
from aitax.cluster.demo import helm as cluster_helm
from aitax.cluster.demo import install
from aitax.cluster.real_cluster import RealCluster
from aitax.common.paths import aitax_home

NAMESPACE = "aitax-test"
RELEASE = "t"
NODES = 3  # one broker per node, as the paper places them
BACKGROUND_BUILD: list[subprocess.Popen] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    here = Path(__file__).parent
    if BACKGROUND_BUILD or not any(here in item.path.parents for item in session.items):
        return
    log = aitax_home() / "logs" / "images-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as output:
        BACKGROUND_BUILD.append(subprocess.Popen([sys.executable, "-m", "aitax.cli", "images", "build", "--no-load"],
                                                 stdout=output, stderr=subprocess.STDOUT, start_new_session=True))


def pytest_sessionfinish(session: pytest.Session) -> None:
    for build in BACKGROUND_BUILD:  # a session that ended before the cluster tests
        if build.poll() is None:
            build.terminate()
            build.wait()


@pytest.fixture(scope="session")
def cluster_was_running() -> bool:
    """A developer's cluster, left as found; one started here goes down at the end with all it runs."""
    return RealCluster(nodes=NODES).is_running()


@pytest.fixture(scope="session")
def cluster(cluster_was_running: bool) -> Iterator[RealCluster]:
    real = RealCluster(nodes=NODES)
    started = time.monotonic()
    try:
        real.up()
        print(f"cluster up in {time.monotonic() - started:.1f} s")
        started = time.monotonic()
        for build in BACKGROUND_BUILD:  # its outcome is build_all's: all cached, or its error raised again here
            build.wait()
        images.build_all(None, tool("pause"))
        real.load_images([images.PAUSE_REFERENCE, *(i.reference for i in images.IMAGES)])
        print(f"images built and loaded in {time.monotonic() - started:.1f} s")
        yield real
    finally:  # also when the setup failed: a half-started cluster must not outlive the tests
        if not cluster_was_running:
            real.down()
    if not cluster_was_running:
        left = {what: items for what, items in real.leftovers().items() if items}
        assert not left, f"`aitax cluster down` left {left}"


@pytest.fixture(scope="session")
def release(cluster: RealCluster, cluster_was_running: bool) -> Iterator[str]:
    """The chart with no values at all, as `helm install aitax charts/aitax` does."""
    if cluster_helm(cluster, "status", RELEASE, "-n", NAMESPACE, check=False).returncode == 0:
        cluster_helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    cluster.kubectl("delete", "pvc", "-n", NAMESPACE, "--all", "--wait=true", check=False, timeout_s=300)
    started = time.monotonic()
    install(cluster, RELEASE, NAMESPACE)
    print(f"helm install --wait with defaults: {time.monotonic() - started:.0f} s")
    yield RELEASE
    # A cluster started here goes down next, with every pod: the release's objects go from etcd (so that the next
    # `up` does not bring them back), with no wait for its pods to end.
    cluster_helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, *(("--wait",) if cluster_was_running else ()),
                 check=False)
    if cluster_was_running:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", check=False, timeout_s=300)
