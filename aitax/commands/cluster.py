"""`aitax cluster ...` (a real single-node Kubernetes on this machine) and `aitax images ...` (the containers/
images built without a registry and loaded into it)."""

from __future__ import annotations

import argparse
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    cluster = subparsers.add_parser(
        "cluster", help="run a real single-node Kubernetes here (containerd, kubelet, CoreDNS)",
        description="A real single-node Kubernetes on this machine: pods are Linux containers with cgroup limits. "
                    "Needs root and `make setup-cluster`. State lives under .aitax/cluster (or $AITAX_HOME).")
    actions = cluster.add_subparsers(dest="cluster_action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start the cluster (idempotent) and wait for a Ready node")
    up.add_argument("--fresh", action="store_true", help="start from an empty etcd (every object gone)")
    up.set_defaults(func=_up)
    status = actions.add_parser("status", help="what runs, the kubeconfig path, and anything `down` left behind")
    status.set_defaults(func=_status)
    demo = actions.add_parser("demo", help="the chart with its defaults on this cluster; then accuracy and latency",
                              description="Cluster up if needed, images built and loaded, a fresh `helm install` "
                                          "with the chart's defaults, faces flowing for --seconds, then the same "
                                          "accuracy and latency breakdown as `aitax demo`. The release keeps running.")
    demo.add_argument("--seconds", type=float, default=90.0, help="identities to let flow before scoring (default 90)")
    demo.add_argument("--namespace", default="aitax")
    demo.set_defaults(func=_demo)
    down = actions.add_parser("down", help="stop every pod and process; remove the bridge, mounts and iptables rules")
    down.set_defaults(func=_down)

    images = subparsers.add_parser(
        "images", help="build the container images here (no registry) and load them into the cluster",
        description="Debian bases from Debian's packages (mmdebstrap), containers/*/Dockerfile built with buildah "
                    "(--pull=never), then imported into the local cluster's containerd.")
    image_actions = images.add_subparsers(dest="images_action", metavar="ACTION", required=True)
    build = image_actions.add_parser("build", help="build (cached) and, when the cluster runs, load the images")
    build.add_argument("names", nargs="*", help="kafka, elasticsearch, emulator, pipeline (default: all)")
    build.add_argument("--no-load", action="store_true", help="do not import them into the cluster")
    build.set_defaults(func=_build)
    listing = image_actions.add_parser("list", help="built images, their sizes and IDs")
    listing.set_defaults(func=_list)
    prune = image_actions.add_parser("prune", help="free disk: drop the layer cache and superseded images",
                                     description="Each pipeline rebuild after a code change leaves about 2-3 GB of "
                                                 "superseded layers. This drops every untagged image (the next build "
                                                 "starts from the bases again).")
    prune.set_defaults(func=_prune)


def _cluster():
    from cluster.node import RealCluster

    return RealCluster()


def _up(args: argparse.Namespace) -> int:
    cluster = _cluster()
    started = time.monotonic()
    cluster.up(fresh=args.fresh)
    print(f"cluster up in {time.monotonic() - started:.1f} s; kubeconfig: {cluster.kubeconfig}")
    print(f"  export KUBECONFIG={cluster.kubeconfig}")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _cluster()
    for process in cluster.processes:
        pid = process.pid()
        print(f"{process.name:24s} {'running (pid ' + str(pid) + ')' if pid else 'stopped'}")
    if cluster.is_running():
        print(f"kubeconfig: {cluster.kubeconfig}")
        print(cluster.kubectl("get", "nodes,pods", "-A", "-o", "wide", check=False).stdout.rstrip())
        return 0
    left = {what: items for what, items in cluster.leftovers().items() if items}
    for what, items in left.items():
        print(f"left behind: {what}: {', '.join(items[:5])}{' ...' if len(items) > 5 else ''}")
    return 1


def _demo(args: argparse.Namespace) -> int:
    from cluster.demo import run_demo

    return run_demo(args.seconds, namespace=args.namespace)


def _down(args: argparse.Namespace) -> int:
    cluster = _cluster()
    cluster.down()
    left = {what: items for what, items in cluster.leftovers().items() if items}
    if left:
        print(f"cluster down, but left behind: {left}")
        return 1
    print("cluster down: no process, mount, network device, iptables chain or ipset left")
    return 0


def _build(args: argparse.Namespace) -> int:
    from cluster import images
    from cluster.k8s import tool

    started = time.monotonic()
    images.build_all(args.names or None, tool("pause"))
    print(f"built in {time.monotonic() - started:.1f} s")
    cluster = _cluster()
    if not args.no_load and cluster.is_running():
        wanted = [i.reference for i in images.IMAGES if not args.names or i.folder in args.names]
        images.load_into(cluster.ctr, cluster.home / "loaded-images", [images.PAUSE_REFERENCE, *wanted])
    elif not args.no_load:
        print("the cluster is not running: images load at the next `aitax images build` or `make k8s-demo`")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from cluster import images

    images.buildah("rm", "--all", quiet=True)  # working containers of interrupted builds
    images.buildah("rmi", "--prune", quiet=True)
    print(f"pruned; {images.images_home()} now holds {_size_gb(images.images_home()):.1f} GB")
    return 0


def _size_gb(folder) -> float:
    import subprocess

    return int(subprocess.run(["du", "-sb", str(folder)], capture_output=True, text=True).stdout.split()[0]) / 1e9


def _list(args: argparse.Namespace) -> int:
    from cluster import images

    references = [b.reference for b in images.BASES] + [images.PAUSE_REFERENCE] + [i.reference for i in images.IMAGES]
    for reference in references:
        current = images.image_id(reference)
        size = f"{images.image_size(reference) / 1e6:8.0f} MB" if current else "   (not built)"
        print(f"{reference:44s} {size} {current[:12] if current else ''}")
    return 0
