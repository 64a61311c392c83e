"""`aitax cluster ...` (a real single-node Kubernetes on this machine) and `aitax images ...` (the containers/
images built without a registry and loaded into it)."""

from __future__ import annotations

import time

import click

from aitax.commands.options import group


def register(root: click.Group) -> None:
    root.add_command(cluster_group)
    root.add_command(images_group)


cluster_group = group(
    "cluster", "run a real single-node Kubernetes here (containerd, kubelet, CoreDNS)",
    "A real single-node Kubernetes on this machine: pods are Linux containers with cgroup limits. Needs root and "
    "`make setup-cluster`. State lives under .aitax/cluster (or $AITAX_HOME).")


def _cluster():
    from cluster.node import RealCluster

    return RealCluster()


@cluster_group.command("up", short_help="start the cluster (idempotent) and wait for a Ready node")
@click.option("--fresh", is_flag=True, help="start from an empty etcd (every object gone)")
def cluster_up(fresh: bool) -> int:
    """Start the cluster (idempotent) and wait for a Ready node."""
    cluster = _cluster()
    started = time.monotonic()
    cluster.up(fresh=fresh)
    print(f"cluster up in {time.monotonic() - started:.1f} s; kubeconfig: {cluster.kubeconfig}")
    print(f"  export KUBECONFIG={cluster.kubeconfig}")
    return 0


@cluster_group.command("status", short_help="what runs, the kubeconfig path, and anything `down` left behind")
def cluster_status() -> int:
    """What runs, the kubeconfig path, and anything `down` left behind; exits 1 when the cluster is not running."""
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


@cluster_group.command(
    "demo", short_help="the chart with its defaults on this cluster; then accuracy and latency",
    help="Cluster up if needed, images built and loaded, a fresh `helm install` with the chart's defaults, faces "
         "flowing for --seconds, then the same accuracy and latency breakdown as `aitax demo`. The release keeps "
         "running.")
@click.option("--seconds", type=float, default=90.0, show_default=True,
              help="identities to let flow before scoring")
@click.option("--namespace", default="aitax", show_default=True, help="namespace of the release")
def cluster_demo(seconds: float, namespace: str) -> int:
    from cluster.demo import run_demo

    return run_demo(seconds, namespace=namespace)


@cluster_group.command("down", short_help="stop every pod and process; remove the bridge, mounts and iptables rules")
def cluster_down() -> int:
    """Stop every pod and process; remove the bridge, mounts and iptables rules."""
    cluster = _cluster()
    cluster.down()
    left = {what: items for what, items in cluster.leftovers().items() if items}
    if left:
        print(f"cluster down, but left behind: {left}")
        return 1
    print("cluster down: no process, mount, network device, iptables chain or ipset left")
    return 0


images_group = group(
    "images", "build the container images here (no registry) and load them into the cluster",
    "Debian bases from Debian's packages (mmdebstrap), containers/*/Dockerfile built with buildah (--pull=never), "
    "then imported into the local cluster's containerd.")


@images_group.command(
    "build", short_help="build (cached) and, when the cluster runs, load the images",
    help="Build (cached) and, when the cluster runs, load the images. NAMES: kafka, elasticsearch, emulator, "
         "pipeline (default: all).")
@click.argument("names", nargs=-1)
@click.option("--no-load", is_flag=True, help="do not import them into the cluster")
def images_build(names: tuple[str, ...], no_load: bool) -> int:
    from cluster import images
    from cluster.k8s import tool

    started = time.monotonic()
    images.build_all(list(names) or None, tool("pause"))
    print(f"built in {time.monotonic() - started:.1f} s")
    cluster = _cluster()
    if not no_load and cluster.is_running():
        wanted = [i.reference for i in images.IMAGES if not names or i.folder in names]
        images.load_into(cluster.ctr, cluster.home / "loaded-images", [images.PAUSE_REFERENCE, *wanted])
    elif not no_load:
        print("the cluster is not running: images load at the next `aitax images build` or `make k8s-demo`")
    return 0


@images_group.command("list", short_help="built images, their sizes and IDs")
def images_list() -> int:
    """Built images, their sizes and IDs."""
    from cluster import images

    references = [b.reference for b in images.BASES] + [images.PAUSE_REFERENCE] + [i.reference for i in images.IMAGES]
    for reference in references:
        current = images.image_id(reference)
        size = f"{images.image_size(reference) / 1e6:8.0f} MB" if current else "   (not built)"
        print(f"{reference:44s} {size} {current[:12] if current else ''}")
    return 0


@images_group.command(
    "prune", short_help="free disk: drop the layer cache and superseded images",
    help="Each pipeline rebuild after a code change leaves about 2-3 GB of superseded layers. This drops every "
         "untagged image (the next build starts from the bases again).")
def images_prune() -> int:
    from cluster import images

    images.buildah("rm", "--all", quiet=True)  # working containers of interrupted builds
    images.buildah("rmi", "--prune", quiet=True)
    print(f"pruned; {images.images_home()} now holds {_size_gb(images.images_home()):.1f} GB")
    return 0


def _size_gb(folder) -> float:
    import subprocess

    return int(subprocess.run(["du", "-sb", str(folder)], capture_output=True, text=True).stdout.split()[0]) / 1e9
