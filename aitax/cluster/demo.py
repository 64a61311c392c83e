"""`make k8s-demo`: the chart installed with its defaults (and the release's own Prometheus) on the local real
cluster, faces flowing through real pods, then the same accuracy and latency breakdown as `make demo`, computed in
an identify pod from the in-cluster Kafka (identities) and Elasticsearch (stage events).

Each demo is a fresh install: a previous release and its claims (brokers' logs, Elasticsearch's indices) are
removed first, so the run id `helm` of the chart's defaults names this run only.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time

from requests.adapters import HTTPAdapter

from aitax.cluster import images
from aitax.cluster.control_plane import tool
from aitax.cluster.real_cluster import RealCluster
from aitax.common.errors import UserError
from aitax.common.paths import PROJECT_ROOT
from aitax.pipeline.evaluate import DEMO_WARMUP_S
from aitax.pipeline.transport.security import READER, READER_MOUNT, TLS_ENV
from aitax.telemetry.elastic_access import CREDENTIALS_ENV

CHART = PROJECT_ROOT / "charts" / "aitax"
INSTALL_TIMEOUT = "20m"
DEMO_VIDEO = "/opt/aitax/demo/video.mp4"  # baked into the pipeline image (containers/pipeline/Dockerfile)
CHART_RUN_ID = "helm"  # the chart's default runId


def helm(cluster: RealCluster, *args: str, check: bool = True, timeout_s: float = 1500
         ) -> subprocess.CompletedProcess:
    result = subprocess.run([str(tool("helm")), f"--kubeconfig={cluster.kubeconfig}", *args],
                            capture_output=True, text=True, timeout=timeout_s)
    if check and result.returncode != 0:
        raise UserError(f"helm {' '.join(args[:2])} failed: {result.stderr.strip()[-600:]}")
    return result


def install(cluster: RealCluster, release: str, namespace: str, *args: str) -> None:
    """`helm install --wait` of the chart; when it fails, the error says which pods were not ready and why."""
    result = helm(cluster, "install", release, str(CHART), "-n", namespace, "--create-namespace", "--wait",
                  "--timeout", INSTALL_TIMEOUT, *args, check=False)
    if result.returncode != 0:
        raise UserError(f"helm install {release} failed: {result.stderr.strip()[-600:]}\n"
                        f"{not_ready_report(cluster, namespace)}")


def reinstall(cluster: RealCluster, release: str, namespace: str, *args: str) -> None:
    """A fresh `install`: the release uninstalled first if it is there, and its volumes' claims deleted, so that no
    broker starts on an earlier run's data."""
    if helm(cluster, "status", release, "-n", namespace, check=False).returncode == 0:
        helm(cluster, "uninstall", release, "-n", namespace, "--wait")
    cluster.kubectl("delete", "pvc", "-n", namespace, "-l", f"app.kubernetes.io/instance={release}", "--wait=true",
                    check=False, timeout_s=300)
    install(cluster, release, namespace, *args)


def not_ready_report(cluster: RealCluster, namespace: str, log_lines: int = 15) -> str:
    """Each node in trouble (its taints and pressure say why pods wait unscheduled), each pod of the namespace that
    is not ready: its phase, every container's state (waiting reason, last exit code and reason, restarts), the last
    log lines of a container that is not ready, and the namespace's warnings."""
    lines = [f"node {name}: {trouble}" for name, trouble in cluster.node_troubles().items() if trouble]
    listing = cluster.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False)
    try:
        pods = json.loads(listing.stdout)["items"]
    except (ValueError, KeyError):
        return "\n".join([*lines, f"no pod listing: {listing.stderr.strip()[-300:]}"])
    for pod in pods:
        name, status = pod["metadata"]["name"], pod.get("status", {})
        main = status.get("containerStatuses", [])
        if status.get("phase") == "Succeeded" or (main and all(c.get("ready") for c in main)):
            continue
        containers = status.get("initContainerStatuses", []) + main
        lines.append(f"pod {name}: {status.get('phase')} {status.get('reason', '')}".rstrip())
        for condition in status.get("conditions", []):
            if condition.get("status") != "True" and condition.get("message"):
                lines.append(f"  {condition['type']}: {condition['message']}")
        for container in containers:
            state = container.get("state", {})
            last = container.get("lastState", {}).get("terminated", {})
            waiting = state.get("waiting", {})
            lines.append(f"  container {container['name']}: ready={container.get('ready')} "
                         f"restarts={container.get('restartCount', 0)} state={next(iter(state), '?')} "
                         f"{waiting.get('reason', '')} {waiting.get('message', '')[:200]}"
                         + (f" last exit {last.get('exitCode')} {last.get('reason', '')}" if last else ""))
            if not container.get("ready"):
                logs = cluster.kubectl("logs", "-n", namespace, name, "-c", container["name"],
                                       f"--tail={log_lines}", *(["--previous"] if last else []), check=False)
                lines += [f"    | {line}" for line in (logs.stdout or logs.stderr).strip().splitlines()]
    events = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "type=Warning",
                             "--sort-by=.lastTimestamp", check=False).stdout.strip().splitlines()
    lines += ["warning events (latest 20):", *events[-20:]]
    return "\n".join(lines)


def fullname(release: str) -> str:
    """The chart's name prefix (its `aitax.fullname`): the release alone when it already holds the chart's name."""
    return release if "aitax" in release else f"{release}-aitax"


def identified_faces(cluster: RealCluster, namespace: str, release: str) -> int:
    """Identify events of the demo run in the in-cluster Elasticsearch (0 while it is not answering), read as the
    release's reader when its Elasticsearch is secured."""
    # Through a port-forward: the release's NetworkPolicy admits its pipeline pods only, not the machine.
    service = f"{fullname(release)}-elasticsearch"
    import requests

    query = {"query": {"bool": {"filter": [{"term": {"run_id": CHART_RUN_ID}}, {"term": {"stage": "identify"}}]}}}
    reader = release_identity(cluster, namespace, release)
    try:
        with cluster.forwarded(namespace, f"svc/{service}", 9200) as port, requests.Session() as session:
            if reader is None:
                response = session.post(f"http://127.0.0.1:{port}/aitax-events-*/_count", timeout=5, json=query)
            else:
                session.mount("https://", ServiceName(service))  # its certificate names the Service
                with tempfile.NamedTemporaryFile(suffix=".crt") as ca:
                    ca.write(reader["ca.crt"])
                    ca.flush()
                    response = session.post(f"https://127.0.0.1:{port}/aitax-events-*/_count", timeout=5,
                                            json=query, verify=ca.name,
                                            auth=(reader["username"].decode().strip(),
                                                  reader["password"].decode().strip()))
        return int(response.json().get("count", 0)) if response.ok else 0
    except (requests.RequestException, ValueError, UserError):
        return 0


def release_identity(cluster: RealCluster, namespace: str, release: str,
                     principal: str = READER) -> dict[str, bytes] | None:
    """A principal's Secret of the release (`<fullname>-identity-<principal>`), or None when security is off."""
    import base64

    found = cluster.kubectl("get", "secret", f"{fullname(release)}-identity-{principal}", "-n", namespace, "-o",
                            "jsonpath={.data}", check=False)
    if found.returncode != 0 or not found.stdout.strip():
        return None
    return {key: base64.b64decode(value) for key, value in json.loads(found.stdout).items()}


class ServiceName(HTTPAdapter):
    """Checks the server's certificate against a Service's name while connecting to its ClusterIP."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__()

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **{**kwargs, "assert_hostname": self.name})


def evaluate_in_pod(cluster: RealCluster, namespace: str, release: str, *options: str) -> str:
    """`aitax evaluate` of the chart's run on the demo video, in an identify pod (the in-cluster Kafka and
    Elasticsearch), with `options` (e.g. --warmup 10 --json): what it printed."""
    # As the reader (its identity is mounted beside identify's when security is on): identify may not read results
    secured = release_identity(cluster, namespace, release) is not None
    reader = ["env", *(f"{variable}={READER_MOUNT}" for variable in (TLS_ENV, CREDENTIALS_ENV))] if secured else []
    return cluster.kubectl(
        "exec", "-n", namespace, f"deploy/{fullname(release)}-identify", "--", *reader, "aitax", "evaluate",
        "--video", DEMO_VIDEO, "--run-id", CHART_RUN_ID, "--events",
        f"{'https' if secured else 'http'}://{fullname(release)}-elasticsearch:9200", *options, timeout_s=600).stdout


def run_demo(seconds: float, namespace: str = "aitax", release: str = "aitax", nodes: int = 0, log=print) -> int:
    cluster = RealCluster(nodes=nodes)
    started = time.monotonic()
    if not cluster.is_running():
        log("== 1/5 cluster up")
        cluster.up()
    else:
        log("== 1/5 cluster already running")
    log("== 2/5 images: build (cached) and load into the cluster's containerd")
    images.build_all(None, tool("pause"), log=log)
    cluster.load_images([images.PAUSE_REFERENCE, *(i.reference for i in images.IMAGES)], log=log)
    log(f"== 3/5 helm install {release} {CHART.relative_to(PROJECT_ROOT)} (defaults) in namespace {namespace}")
    install_started = time.monotonic()
    # The release's own Prometheus (on by default) reads cAdvisor from the kubelet, which `aitax cluster` runs on
    # a port of its own.
    reinstall(cluster, release, namespace, "--set", f"prometheus.kubelet.port={cluster.kubelet_port}")
    log(f"   installed, every pod ready, in {time.monotonic() - install_started:.0f} s")
    log(f"== 4/5 faces flowing: {seconds:.0f} s of identities")
    deadline = time.monotonic() + max(seconds, 600)
    first_identity = None
    while time.monotonic() < deadline:
        faces = identified_faces(cluster, namespace, release)
        if faces and first_identity is None:
            first_identity = time.monotonic()
            log(f"   first identities after {first_identity - install_started:.0f} s")
        if first_identity is not None and time.monotonic() - first_identity >= seconds:
            break
        time.sleep(5)
    if first_identity is None:
        raise UserError(f"no identities after {max(seconds, 600):.0f} s: kubectl --kubeconfig {cluster.kubeconfig} "
                        f"logs -n {namespace} deploy/{fullname(release)}-identify")
    log("== 5/5 score against ground truth (in an identify pod: the in-cluster Kafka and Elasticsearch)")
    window = ("--window", f"{seconds - DEMO_WARMUP_S:g}") if seconds > DEMO_WARMUP_S else ()
    log(evaluate_in_pod(cluster, namespace, release, "--warmup", f"{DEMO_WARMUP_S:g}", *window).rstrip())
    log(f"k8s demo done in {time.monotonic() - started:.0f} s. The release keeps running; pods:")
    log(cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout.rstrip())
    log(f"remove it: {tool('helm')} --kubeconfig {cluster.kubeconfig} uninstall {release} -n {namespace}; "
        "stop the cluster: aitax cluster down")
    return 0
