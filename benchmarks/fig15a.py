"""The paper's Fig. 15a on `aitax cluster`: the highest stable acceleration factor with 3 brokers against 5.

The paper spreads the brokers' storage load over more brokers, each with its own drive, and finds that 3 brokers
break at 8x while 4 carry 8x, 6 carry 16x and 8 carry 32x. Here each broker has its own node, and the node's link,
shaped, stands for the broker's bandwidth: this machine's 2 cores and one disk cannot be the paper's drives, but a
link of a set rate per broker node is a limit that more brokers share out, as theirs did.

Six nodes: 0-4 hold the brokers (one each: the chart's anti-affinity), node 5 (tainted aitax.io/clients) the
paper's compute side: the emulated load, Elasticsearch and Prometheus, on an unshaped link. The chart goes in with
charts/aitax/ci/fig15a-values.yaml; then `aitax experiment` runs benchmarks/experiments/fig15a-brokers.yaml:
factors 1x-4x with 3 brokers, then 1x-6x with 5 (the resize rebalances the topics), the brokers' links at 10
Mbit/s (`links: {nodes: brokers}`), each phase judged as every run is. It ends with the highest stable factor per
broker count, beside the paper's.

    .venv/bin/python benchmarks/fig15a.py [--spec FILE] [--values FILE] [--keep]

Needs root (as `aitax cluster up`) and about 40 minutes; the cluster must be down or already have 6 nodes. The
release is uninstalled at the end unless --keep. Results: .aitax/experiments/fig15a-brokers-<stamp>.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HERE = Path(__file__).resolve().parent
NODES = 6
CLIENTS_TAINT = "aitax.io/clients=true:NoSchedule"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", type=Path, default=HERE / "experiments" / "fig15a-brokers.yaml",
                        help="the experiment's phases (default: %(default)s)")
    parser.add_argument("--values", type=Path, default=HERE.parent / "charts" / "aitax" / "ci" / "fig15a-values.yaml",
                        help="the chart's values (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="leave the release installed at the end")
    args = parser.parse_args(argv)

    from aitax.cluster import images
    from aitax.cluster.control_plane import tool
    from aitax.cluster.demo import helm, reinstall
    from aitax.cluster.node import Node
    from aitax.cluster.real_cluster import RealCluster
    from aitax.common.errors import UserError
    from aitax.common.paths import aitax_home
    from aitax.experiment.kubernetes_api import KubernetesCluster
    from aitax.experiment.kubernetes_backend import KubernetesBackend
    from aitax.experiment.runner import run_experiment
    from aitax.experiment.spec import load_spec

    try:
        spec = load_spec(args.spec)
        cluster = RealCluster(nodes=NODES)
        started = time.monotonic()
        cluster.up()
        clients = Node(NODES - 1).name
        cluster.kubectl("taint", "node", clients, CLIENTS_TAINT, "--overwrite")
        print(f"cluster of {NODES} nodes up; {clients} takes the load alone ({CLIENTS_TAINT})")
        images.build_all(None, tool("pause"))
        cluster.load_images([images.PAUSE_REFERENCE, *(i.reference for i in images.IMAGES)])
        namespace = spec.namespace or spec.release
        reinstall(cluster, spec.release, namespace, "-f", str(args.values),
                  "--set", f"prometheus.kubelet.port={cluster.kubelet_port}")
        print(f"release {spec.release} installed ({time.monotonic() - started:.0f} s so far)")
        backend = KubernetesBackend(spec, KubernetesCluster(str(cluster.kubeconfig), namespace=namespace))
        try:
            _, out_file = run_experiment(spec, backend, None, aitax_home() / "experiments")
        finally:
            if not args.keep:
                helm(cluster, "uninstall", spec.release, "-n", namespace, "--wait", check=False)
        print(f"results: {out_file} ({time.monotonic() - started:.0f} s in all)")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
