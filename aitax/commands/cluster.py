"""`aitax cluster ...` (a real Kubernetes of one or more nodes on this machine) and `aitax images ...` (the containers/
images built without a registry and loaded into it)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from aitax.commands.options import group
from aitax.common.errors import UserError

if TYPE_CHECKING:
    from aitax.stack.config import TopicSpec


def register(root: click.Group) -> None:
    root.add_command(cluster_group)
    root.add_command(images_group)


cluster_group = group(
    "cluster", "run a real Kubernetes of N nodes here (containerd, kubelet, CoreDNS), links shaped",
    "A real Kubernetes on this machine: each node a network namespace with its own kubelet, containerd and link; "
    "pods are Linux containers with cgroup limits. Needs root and `make setup-cluster`. State lives under "
    ".aitax/cluster (or $AITAX_HOME). docs/kubernetes.md has the layout.")


def _cluster(nodes: int = 0, link=None):
    from aitax.cluster.links import LinkShape
    from aitax.cluster.real_cluster import RealCluster

    return RealCluster(nodes=nodes, link=link or LinkShape())


def _link_options(function):
    """--link-rate/--link-delay/--link-loss."""
    function = click.option("--link-loss", "loss_percent", type=float,
                            help="per cent of packets dropped each way  [default: none]")(function)
    function = click.option("--link-delay", "delay_ms", type=float,
                            help="milliseconds added each way (needs the kernel's netem qdisc)")(function)
    return click.option("--link-rate", "rate",
                        help="each way, e.g. 1gbit, 250mbit  [default: as fast as the machine]")(function)


def _shape(rate: str | None, delay_ms: float | None, loss_percent: float | None):
    from aitax.cluster.links import LinkShape, parse_rate

    return LinkShape(rate_mbit=parse_rate(rate) if rate else None, delay_ms=delay_ms, loss_percent=loss_percent)


@cluster_group.command("up", short_help="start the cluster (idempotent) and wait for every node Ready")
@click.option("--nodes", type=click.IntRange(1, 8), default=None,
              help="nodes, each its own network namespace and link  [default: as running, else 1]")
@click.option("--fresh", is_flag=True, help="start from an empty etcd (every object gone)")
@_link_options
def cluster_up(nodes: int | None, fresh: bool, rate: str | None, delay_ms: float | None,
               loss_percent: float | None) -> int:
    """Start the cluster (idempotent) and wait for every node Ready; every node's link shaped as given."""
    cluster = _cluster(nodes or 0, _shape(rate, delay_ms, loss_percent))
    started = time.monotonic()
    cluster.up(fresh=fresh)
    print(f"cluster of {len(cluster.node_list)} node(s) up in {time.monotonic() - started:.1f} s; "
          f"links: {cluster.link.describe()}; kubeconfig: {cluster.kubeconfig}")
    print(f"  export KUBECONFIG={cluster.kubeconfig}")
    return 0


@cluster_group.command("link", short_help="shape nodes' links while the cluster runs (no option: unshaped)")
@click.option("--node", "names", multiple=True, metavar="NAME",
              help="a node (aitax-node-<i>); repeatable  [default: every node]")
@_link_options
def cluster_link(names: tuple[str, ...], rate: str | None, delay_ms: float | None, loss_percent: float | None) -> int:
    """Shape the nodes' links, each way: what a node sends and what it receives. No option clears the shaping."""
    cluster = _cluster()
    if not cluster.is_running():
        raise UserError("the cluster is not running: `aitax cluster up` first")
    known = {node.name: node for node in cluster.node_list}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise click.BadParameter(f"{unknown[0]!r}: the nodes are {', '.join(known)}", param_hint="--node")
    shape = _shape(rate, delay_ms, loss_percent)
    chosen = [known[name] for name in names] or list(known.values())
    cluster.reshape(shape, chosen)
    print(f"{', '.join(node.name for node in chosen)}: {shape.describe()}")
    return 0


@cluster_group.command("status", short_help="what runs, the kubeconfig path, and anything `down` left behind")
def cluster_status() -> int:
    """What runs, the kubeconfig path, and anything `down` left behind; exits 1 when the cluster is not running."""
    cluster = _cluster()
    for process in cluster.processes:
        pid = process.pid()
        print(f"{process.name:24s} {'running (pid ' + str(pid) + ')' if pid else 'stopped'}")
    if cluster.is_running():
        from aitax.cluster import links
        for node in cluster.node_list:
            print(f"{node.name:24s} {node.ip:12s} link: {links.current(node.host_device) or 'unshaped'}")
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
@click.option("--nodes", type=click.IntRange(1, 8), default=None,
              help="nodes of a cluster it starts  [default: as running, else 1]")
def cluster_demo(seconds: float, namespace: str, nodes: int | None) -> int:
    from aitax.cluster.demo import run_demo

    return run_demo(seconds, namespace=namespace, nodes=nodes or 0)


@cluster_group.command(
    "issue-secrets", short_help="a release's CA, certificates and passwords as Secrets (the chart's Job runs it)",
    help="In the chart's pre-install/pre-upgrade Job: make each principal's Secret PREFIX-PRINCIPAL (ca.crt, "
         "tls.crt, tls.key, username, password), the CA's (PREFIX-ca) and the bundled Elasticsearch's file realm "
         "(PREFIX-elasticsearch-realm) where they are missing or near expiry; existing ones are kept. Talks to the "
         "API server as the pod's service account.")
@click.option("--prefix", required=True, help="the release's full name: Secrets are PREFIX-<principal>")
@click.option("--broker-host", "broker_hosts", multiple=True, required=True,
              help="a name the brokers' certificate holds (repeatable; `*.` wildcards allowed)")
@click.option("--elasticsearch-host", "elasticsearch_hosts", multiple=True,
              help="a name the bundled Elasticsearch's certificate holds (repeatable)")
@click.option("--dashboard-host", "dashboard_hosts", multiple=True,
              help="a name the dashboard's certificate holds (repeatable); none: no dashboard identity")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="a label on every Secret made")
def cluster_issue_secrets(prefix: str, broker_hosts: tuple[str, ...], elasticsearch_hosts: tuple[str, ...],
                          dashboard_hosts: tuple[str, ...], labels: tuple[str, ...]) -> int:
    from aitax.stack.release_secrets import SecretsApi, ensure_release_secrets, namespace
    from aitax.stack.security import BROKER, DASHBOARD, ELASTICSEARCH

    pairs = dict(label.split("=", 1) for label in labels if "=" in label)
    if len(pairs) != len(labels):
        raise click.BadParameter("give KEY=VALUE", param_hint="--label")
    servers = {BROKER: broker_hosts, ELASTICSEARCH: elasticsearch_hosts or ("localhost",)}
    if dashboard_hosts:
        servers[DASHBOARD] = dashboard_hosts
    ensure_release_secrets(SecretsApi(namespace()), prefix, servers, pairs)
    return 0


@cluster_group.command(
    "ensure-topics", short_help="create a release's topics, apply their settings, grant ACLs (the topics Job)",
    help="In the chart's topics Job: create the topics that are missing, apply each one's settings to those that "
         "exist (a `helm upgrade` may change them) and, with TLS ($AITAX_KAFKA_TLS, the admin), grant each stage's "
         "principal what it needs on them (aitax/stack/security.py's table); the local stack's code "
         "(stack.kafka.ensure_topics_with). Waits up to --timeout for the brokers; running it again changes nothing.")
@click.option("--bootstrap", required=True, help="the brokers, HOST:PORT[,...]")
@click.option("--topic", "topics", multiple=True, required=True, metavar="NAME:PARTITIONS:ROLE[:KEY=VALUE,...]",
              help="a topic, its partitions, the `Topics` field it is (faces, identities, dlq, frames, detections) "
                   "and its settings; repeatable")
@click.option("--replication-factor", type=click.IntRange(min=1), default=3, show_default=True,
              help="replicas of each topic's partitions (the release's kafka.replicationFactor)")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True,
              help="seconds to wait for the brokers")
@click.option("--broker-warmup", "broker_warmup_s", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="when a topic is missing (a new release, its brokers fresh): seconds of records sent and read back "
                   "through the brokers before the topics are created, so that their JIT has compiled Kafka's "
                   "request paths before the stages, which wait for the topics, send any (stack.warmup)")
def cluster_ensure_topics(bootstrap: str, topics: tuple[str, ...], replication_factor: int, timeout_s: float,
                          broker_warmup_s: float) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from aitax.common.daemons import poll_until
    from aitax.pipeline.transport.admin import retry_transient
    from aitax.pipeline.transport.security import librdkafka_settings, tls_from_environment
    from aitax.stack.kafka import ensure_topics_with

    specs = [_topic_spec(topic) for topic in topics]
    acls = tls_from_environment() is not None
    admin = AdminClient(librdkafka_settings(bootstrap, {"log_level": 0}))

    def registered() -> int:
        try:
            return len(admin.list_topics(timeout=10).brokers)
        except KafkaException:
            return 0

    # A broker pod is Ready a moment before the controller registers it: a topic of RF 3 needs 3 registered.
    if not poll_until(lambda: registered() >= replication_factor, timeout_s, interval_s=2.0):
        raise UserError(f"ensuring topics at {bootstrap} failed: fewer than {replication_factor} brokers registered "
                        f"after {timeout_s:g} s")
    try:
        missing = not {spec.name for spec in specs} <= set(retry_transient(lambda: admin.list_topics(timeout=10),
                                                                           timeout_s).topics)
        if missing and broker_warmup_s > 0:
            from aitax.stack.warmup import warm_brokers

            min_insync = int(next((spec.config["min.insync.replicas"] for spec in specs
                                   if "min.insync.replicas" in spec.config), 1))
            print(warm_brokers(librdkafka_settings(bootstrap, {"log_level": 0}), replication_factor, min_insync,
                               broker_warmup_s).summary(), flush=True)
        retry_transient(lambda: ensure_topics_with(AdminClient(librdkafka_settings(bootstrap, {"log_level": 0})),
                                                   specs, replication_factor, acls, 30.0), timeout_s)
    except KafkaException as exception:
        raise UserError(f"ensuring topics at {bootstrap} failed: {exception.args[0]}") from exception
    for spec in specs:
        settings = ",".join(f"{key}={value}" for key, value in spec.config.items())
        print(f"topic {spec.name}: {spec.partitions} partitions, RF {replication_factor}, {settings}")
    if acls:
        print(f"ACLs granted on {', '.join(spec.name for spec in specs)}")
    return 0


def _topic_spec(text: str) -> TopicSpec:
    """NAME:PARTITIONS:ROLE[:KEY=VALUE,...] as a TopicSpec; a bad one is named."""
    from aitax.pipeline.schema import Topics
    from aitax.stack.config import TopicSpec

    name, partitions, role, settings = (*text.split(":", 3), "", "", "")[:4]
    entries = [entry.split("=", 1) for entry in settings.split(",") if entry]
    roles = set(Topics.__dataclass_fields__)
    if not name or not partitions.isdigit() or int(partitions) < 1 or role not in roles \
            or any(len(entry) != 2 for entry in entries):
        raise click.BadParameter(f"{text!r}: give NAME:PARTITIONS:ROLE[:KEY=VALUE,...], PARTITIONS at least 1, "
                                 f"ROLE one of {', '.join(sorted(roles))}", param_hint="--topic")
    return TopicSpec(name, int(partitions), dict(entries), carries=role)


@cluster_group.command("down", short_help="stop every pod and process; remove the nodes, links, mounts and cgroups")
def cluster_down() -> int:
    """Stop every pod and process; remove the nodes' namespaces (their iptables rules and ipsets with them), the
    links and bridge, mounts and cgroups."""
    cluster = _cluster()
    cluster.down()
    left = {what: items for what, items in cluster.leftovers().items() if items}
    if left:
        print(f"cluster down, but left behind: {left}")
        return 1
    print("cluster down: no process, mount, network namespace or device, or cgroup left")
    return 0


images_group = group(
    "images", "build the container images here (no registry) and load them into the cluster",
    "Debian bases from Debian's packages (mmdebstrap), containers/*/Dockerfile built with buildah (--pull=never), "
    "then imported into the local cluster's containerd.")


@images_group.command(
    "build", short_help="build (cached) and, when the cluster runs, load the images",
    help="Build (cached) and, when the cluster runs, load the images. NAMES: kafka, elasticsearch, emulator, "
         "pipeline, pipeline-gpu (default: all but pipeline-gpu).")
@click.argument("names", nargs=-1)
@click.option("--no-load", is_flag=True, help="do not import them into the cluster")
@click.option("--gpu", is_flag=True,
              help="also pipeline-gpu: the pipeline with PyTorch's CUDA build and NVIDIA's libraries, for "
                   "the runtime cuda (about 2.6 GB more; needs the pipeline image, built first)")
def images_build(names: tuple[str, ...], no_load: bool, gpu: bool) -> int:
    from aitax.cluster import images
    from aitax.cluster.control_plane import tool

    started = time.monotonic()
    images.build_all(list(names) or None, tool("pause"), gpu=gpu)
    print(f"built in {time.monotonic() - started:.1f} s")
    cluster = _cluster()
    if not no_load and cluster.is_running():
        wanted = [i.reference for i in images.wanted_images(list(names) or None, gpu)]
        cluster.load_images([images.PAUSE_REFERENCE, *wanted])
    elif not no_load:
        print("the cluster is not running: images load at the next `aitax images build` or `make k8s-demo`")
    return 0


@images_group.command("list", short_help="built images, their sizes and IDs")
def images_list() -> int:
    """Built images, their sizes and IDs."""
    from aitax.cluster import images

    references = [b.reference for b in images.BASES] + [images.PAUSE_REFERENCE] + [i.reference for i in images.IMAGES]
    for reference in references:
        current = images.image_id(reference)
        size = f"{images.image_size(reference) / 1e6:8.0f} MB" if current else "   (not built)"
        print(f"{reference:44s} {size} {current[:12] if current else ''}")
    return 0


@images_group.command(
    "prune", short_help="free disk: drop the layer cache and superseded images",
    help="Each pipeline rebuild after a code change leaves about 2-3 GB of superseded layers (`images build` prunes "
         "by itself past $AITAX_IMAGES_BUDGET_GIB, default 20). This drops every untagged image (the next build "
         "starts from the bases again).")
def images_prune() -> int:
    from aitax.cluster import images

    images.prune()
    print(f"pruned; {images.images_home()} now holds {images.store_bytes() / 1e9:.1f} GB")
    return 0
