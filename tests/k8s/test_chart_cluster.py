"""The chart on a REAL kube-apiserver + etcd (kwok's fake nodes: pods are scheduled and reported Ready but do not
run): install, upgrade, `helm test`, the experiment driver scaling the chart's workloads, uninstall."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from aitax.common.errors import UserError
from aitax.experiment.kubernetes_api import KubernetesCluster
from aitax.experiment.kubernetes_backend import KubernetesBackend
from aitax.experiment.runner import run_experiment
from aitax.experiment.spec import parse_spec
from aitax.pipeline.transport.readback import Collected, GroupState, RunReadback
from aitax.telemetry.latency import Timeline
from tests.k8s.conftest import CHART, helm, operator_crd_files, render

pytestmark = pytest.mark.k8s

NAMESPACE = "aitax-test"
RELEASE = "exp"
INSTALL_SETS = (
    "identify.gallery.base64=UEsDBBQAAAAAAA==",
    "elasticsearch.bundled.enabled=true",
    # What a multi-node cluster sets (the default is soft, for one node): 4 fake nodes, one broker each.
    "kafka.antiAffinity=hard",
    "kafka.persistence.logDirs=2",
    "kafka.heapOpts=-Xms512m -Xmx512m",
    # kwok's pods run nothing: a Prometheus there answers no query (the real cluster's does: tests/cluster).
    "prometheus.enabled=false",
)


def _sets(*extra: str) -> list[str]:
    args = []
    for assignment in (*INSTALL_SETS, *extra):
        args += ["--set", assignment]
    return args


def _get(plane, *args: str) -> dict:
    return json.loads(plane.kubectl("-n", NAMESPACE, "get", *args, "-o", "json").stdout)


def _replicas(plane) -> dict[str, tuple[int, int]]:
    """(spec.replicas, status.readyReplicas) of every workload of the release, as the API server reports them."""
    found = {}
    for kind in ("deployments", "statefulsets"):
        for item in _get(plane, kind, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]:
            component = item["metadata"]["labels"]["app.kubernetes.io/component"]
            found[component] = (item["spec"]["replicas"], item["status"].get("readyReplicas", 0))
    return found


def _completed_jobs(plane) -> dict[str, bool]:
    """Each Job of the release, and whether it completed."""
    return {job["metadata"]["name"]: any(c["type"] == "Complete" and c["status"] == "True"
                                         for c in job.get("status", {}).get("conditions", []))
            for job in _get(plane, "jobs", "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]}


def _wait(condition, what: str, timeout_s: float = 60) -> None:
    """kwok completes a Job's pod a moment after `helm --wait` returns: Helm waits for pods, not Jobs."""
    from aitax.common.daemons import poll_until

    assert poll_until(condition, timeout_s, 0.5), f"{what}: not after {timeout_s:g} s"


def _env(plane, deployment: str) -> dict[str, str]:
    item = _get(plane, "deployment", deployment)
    return {e["name"]: e.get("value") for e in item["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.fixture(scope="module")
def release(control_plane):
    plane = control_plane
    plane.kubectl("create", "namespace", NAMESPACE)
    started = time.monotonic()
    result = helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--wait", "--timeout", "180s", *_sets(),
                  kubeconfig=plane.kubeconfig)
    print(f"helm install --wait: {time.monotonic() - started:.1f} s")
    assert "STATUS: deployed" in result.stdout
    assert "helm test exp -n aitax-test" in result.stdout  # NOTES.txt
    yield plane
    helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s", kubeconfig=plane.kubeconfig,
         check=False)


def test_install_brings_every_workload_up(release) -> None:
    plane = release
    assert _replicas(plane) == {"kafka": (3, 3), "ingest-detect": (1, 1), "identify": (2, 2),
                                "elasticsearch": (1, 1), "dashboard": (1, 1)}
    pvcs = _get(plane, "pvc")["items"]
    kafka_claims = sorted(p["metadata"]["name"] for p in pvcs if "-kafka-" in p["metadata"]["name"])
    assert kafka_claims == sorted(f"data-{d}-exp-aitax-kafka-{o}" for d in (0, 1) for o in range(3))
    assert {p["status"]["phase"] for p in pvcs} == {"Bound"}
    pods = _get(plane, "pods", "-l", "app.kubernetes.io/component=kafka")["items"]
    assert len({p["spec"]["nodeName"] for p in pods}) == 3  # one broker per node (hard anti-affinity)
    assert _get(plane, "pdb", "exp-aitax-kafka")["status"]["disruptionsAllowed"] == 1
    assert _get(plane, "networkpolicy", "exp-aitax-kafka")["spec"]["podSelector"]
    # The topics Job is the release's (not a hook: the stages' readiness waits for the topics) and ran to completion.
    _wait(lambda: _completed_jobs(plane) == {"exp-aitax-topics-1": True}, "the topics Job")


def test_upgrade_changes_the_release(release) -> None:
    plane = release
    result = helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--wait", "--timeout", "180s",
                  *_sets("ingestDetect.replicas=2", "topics.faces.retentionMs=600000"), kubeconfig=plane.kubeconfig)
    assert "STATUS: deployed" in result.stdout and "REVISION: 2" in result.stdout
    assert _replicas(plane)["identify"] == (4, 4)  # 2 identify per ingest-detect
    assert _replicas(plane)["ingest-detect"] == (2, 2)
    status = json.loads(helm("status", RELEASE, "-n", NAMESPACE, "-o", "json", kubeconfig=plane.kubeconfig).stdout)
    assert status["version"] == 2 and status["info"]["status"] == "deployed"
    # The new revision's topics Job applied the new retention; the previous revision's is gone with it.
    _wait(lambda: _completed_jobs(plane) == {"exp-aitax-topics-2": True}, "the second revision's topics Job")
    helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--wait", "--timeout", "180s", *_sets(),
         kubeconfig=plane.kubeconfig)
    assert _replicas(plane)["identify"] == (2, 2)


def test_helm_test_runs_the_probe_pod(release) -> None:
    plane = release
    result = helm("test", RELEASE, "-n", NAMESPACE, "--timeout", "120s", kubeconfig=plane.kubeconfig)
    assert "exp-aitax-test-kafka-probe" in result.stdout and "Succeeded" in result.stdout
    pod = _get(plane, "pod", "exp-aitax-test-kafka-probe")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["spec"]["containers"][0]["args"][:2] == ["--bootstrap", ",".join(
        f"exp-aitax-kafka-{o}.exp-aitax-kafka-headless.{NAMESPACE}.svc.cluster.local:9092" for o in range(3))]


def _contains(stored: object, rendered: object) -> bool:
    """Everything rendered is stored unchanged (the API server may add defaults, never drop or alter fields)."""
    if isinstance(rendered, dict):
        return isinstance(stored, dict) and all(k in stored and _contains(stored[k], v) for k, v in rendered.items())
    if isinstance(rendered, list):
        return isinstance(stored, list) and len(stored) == len(rendered) and all(map(_contains, stored, rendered))
    return stored == rendered


def test_operator_monitors_are_accepted_and_find_stages_and_brokers(release) -> None:
    """With prometheus-operator's CRDs installed, the ServiceMonitor and PodMonitor pass the API server's own
    schema validation untouched, and the metrics Service's endpoints are the stage pods and the brokers."""
    plane = release
    for crd in operator_crd_files():
        plane.kubectl("apply", "--server-side", "-f", str(crd))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                  "crd/podmonitors.monitoring.coreos.com", "crd/servicemonitors.monitoring.coreos.com")
    monitors = ("metrics.podMonitor.enabled=true", "metrics.serviceMonitor.enabled=true")
    helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--wait", "--timeout", "180s", *_sets(*monitors),
         kubeconfig=plane.kubeconfig)
    rendered = [d for d in render(sets=(*INSTALL_SETS, *monitors), release=RELEASE, namespace=NAMESPACE)
                if d["kind"] in ("PodMonitor", "ServiceMonitor")]
    assert sorted(d["kind"] for d in rendered) == ["PodMonitor", "ServiceMonitor"]
    for doc in rendered:
        stored = _get(plane, doc["kind"].lower(), doc["metadata"]["name"])
        assert _contains(stored["spec"], doc["spec"]), (doc["spec"], stored["spec"])

    expected = {"exp-aitax-kafka": 9404, "exp-aitax-ingest-detect": 9400, "exp-aitax-identify": 9400}
    deadline = time.monotonic() + 60
    while True:  # the endpoint slice controller catches up with the new Service
        slices = _get(plane, "endpointslices", "-l", "kubernetes.io/service-name=exp-aitax-metrics")["items"]
        # Pod name -> its workload's name: brokers end in -<ordinal>, Deployment pods in -<hash>-<suffix>.
        ports = {re.sub(r"-[a-z0-9]{6,10}-[a-z0-9]{5}$|-\d+$", "", endpoint["targetRef"]["name"]): port["port"]
                 for item in slices for port in item.get("ports") or [] for endpoint in item.get("endpoints") or []}
        if ports == expected or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert ports == expected


def test_invalid_values_are_refused_by_install(control_plane) -> None:
    result = helm("install", "bad", str(CHART), "-n", NAMESPACE, "--set", "kafka.replicas=2",
                  kubeconfig=control_plane.kubeconfig, check=False)
    assert result.returncode != 0 and "/kafka/replicas" in result.stderr


SPEC = {
    "name": "scale-test",
    "mode": "real",
    "release": RELEASE,
    "phases": [
        {"name": "baseline", "duration": 1, "replicas": {"kafka": 3, "ingest-detect": 1, "identify": 2}},
        {"name": "wide", "duration": 1, "replicas": {"kafka": 4, "ingest-detect": 3, "identify": 6}},
        {"name": "narrow", "duration": 1, "replicas": {"identify": 1}},
    ],
}


def test_experiment_scales_the_workloads_and_restores_them(release, tmp_path: Path) -> None:
    """Each phase through the load engine: Kafka resized, consumers rolled out with the phase's run id and ready,
    producers for the duration, then scaled to zero before the drain and the read-back. kwok's pods run nothing, so
    `aitax collect` (an exec into a consumer pod on a real cluster: tests/cluster) answers from the test, and
    records what the API server reported when it was asked."""
    plane = release
    before = _replicas(plane)
    asked: list[dict] = []

    def collect(args: list[str]) -> Collected:
        asked.append({"args": args, "api": _replicas(plane), "env": _env(plane, "exp-aitax-identify")})
        if args[0] == "--group":
            members = asked[-1]["api"]["identify"][0]
            return Collected(group=GroupState(group=args[1], topic="faces", state="STABLE", members=members,
                                              assigned=members, partitions=12, lag=0))
        start = time.time_ns()
        edges = len(Timeline._fields) - 1  # every timestamp, then the batch size
        timelines = [Timeline(*(start + i * 100_000_000 + step * 1_000_000 for step in range(edges)), 1)
                     for i in range(3)]
        return Collected(readback=RunReadback(run_id=args[1], produced_faces=3, face_bytes_mean=9000.0,
                                              identified_faces=3, duplicates=0, timelines=timelines))

    spec = parse_spec(SPEC, source="scale-test.yaml")
    cluster = KubernetesCluster(kubeconfig=str(plane.kubeconfig), namespace=NAMESPACE)
    backend = KubernetesBackend(spec, cluster, rollout_timeout_s=120, collect=collect)
    results, out_file = run_experiment(spec, backend, None, tmp_path)
    assert [r.replicas for r in results] == [
        {"kafka": 3, "identify": 2, "ingest-detect": 1},
        {"kafka": 4, "identify": 6, "ingest-detect": 3},
        {"kafka": 4, "identify": 1, "ingest-detect": 3},
    ]
    ready = [call for call in asked if call["args"][0] == "--group"]
    readbacks = [call for call in asked if call["args"][0] == "--run-id"]
    # Consumers asked for their group once rolled out with the phase's run id, before any producer ran.
    firsts = [next(call for call in ready if call["env"]["AITAX_RUN_ID"] == r.run_id) for r in results]
    # The release's own producer (the chart's) was stopped first: its backlog is not the first phase's broker wait.
    assert [(call["api"]["kafka"], call["api"]["identify"], call["api"]["ingest-detect"]) for call in firsts] == [
        ((3, 3), (2, 2), (0, 0)),
        ((4, 4), (6, 6), (0, 0)),
        ((4, 4), (1, 1), (0, 0)),
    ]
    # The read-back of each phase: its run id, producers scaled to zero (flushed), the consumers still there.
    assert [call["args"][:3] for call in readbacks] == [["--run-id", r.run_id, "--since-ms"] for r in results]
    assert all(int(call["args"][3]) < r.started_at * 1000 for call, r in zip(readbacks, results, strict=True))
    assert [(call["api"]["identify"], call["api"]["ingest-detect"]) for call in readbacks] == [
        ((2, 2), (0, 0)), ((6, 6), (0, 0)), ((1, 1), (0, 0))]
    # A RunResult per phase, from what was read back.
    assert [(r.run.run_id, r.run.produced_faces, r.run.identified_faces, r.run.latency.faces) for r in results] == [
        (r.run_id, 3, 3, 3) for r in results]
    assert all(r.run.process_failures == [] and r.run.workload.consumers == r.replicas["identify"] for r in results)
    document = json.loads(out_file.read_text())
    assert document["phases"][1]["run"]["produced_faces"] == 3
    assert results[0].run_id.startswith("scale-test-baseline-")
    assert json.loads(out_file.read_text())["phases"][2]["replicas"]["identify"] == 1
    # Restored: the original counts and the chart's environment.
    assert _replicas(plane) == before
    # Kafka went 3 -> 4 (rebalance onto the new broker after its rollout) and back (rebalance off it first).
    jobs = sorted(_get(plane, "jobs", "-l", "app.kubernetes.io/component=kafka-rebalance")["items"],
                  key=lambda job: job["metadata"]["creationTimestamp"])
    assert [job["spec"]["template"]["spec"]["containers"][0]["command"] for job in jobs] == [
        ["/opt/kafka/bin/kafka-rebalance-topics", "4"], ["/opt/kafka/bin/kafka-rebalance-topics", "3"]]
    assert [job["status"].get("succeeded") for job in jobs] == [1, 1]
    broker_pod = _get(plane, "statefulset", "exp-aitax-kafka")["spec"]["template"]["spec"]
    job_pod = jobs[0]["spec"]["template"]
    assert job_pod["metadata"]["labels"]["aitax/kafka-client"] == RELEASE  # admitted by the NetworkPolicy
    container = job_pod["spec"]["containers"][0]
    assert container["image"] == broker_pod["containers"][0]["image"]
    assert container["securityContext"] == broker_pod["containers"][0]["securityContext"]
    assert job_pod["spec"]["securityContext"] == broker_pod["securityContext"]
    # Bootstrap: the brokers that stay (all four after scaling up; before scaling down, not the leaving one).
    for job, brokers in zip(jobs, (4, 3), strict=True):
        env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["KAFKA_BOOTSTRAP"].split(",") == [
            f"exp-aitax-kafka-{o}.exp-aitax-kafka-headless.{NAMESPACE}.svc.cluster.local:9092" for o in range(brokers)]
    assert _env(plane, "exp-aitax-identify")["AITAX_RUN_ID"] == "helm"
    assert _env(plane, "exp-aitax-identify")["AITAX_ACCELERATION_FACTOR"] == "1"


def test_spec_errors_stop_before_anything_is_scaled(release) -> None:
    plane = release
    before = _replicas(plane)
    spec = parse_spec({**SPEC, "release": "missing"}, source="s.yaml")
    cluster = KubernetesCluster(kubeconfig=str(plane.kubeconfig), namespace=NAMESPACE)
    with pytest.raises(UserError, match=r"no StatefulSet with labels app.kubernetes.io/instance=missing"):
        run_experiment(spec, KubernetesBackend(spec, cluster), None, Path("/nonexistent-never-written"))
    emulated = parse_spec({"name": "e", "mode": "emulated", "release": RELEASE, "phases": [
        {"name": "p", "duration": 1, "replicas": {"emulate-producers": 2, "emulate-consumers": 2}}]})
    with pytest.raises(UserError, match=r"no Deployment with labels .*component=emulate-consumers"):
        run_experiment(emulated, KubernetesBackend(emulated, cluster), None, Path("/nonexistent-never-written"))
    assert _replicas(plane) == before


def test_unreachable_cluster_is_a_clear_error(tmp_path: Path, control_plane) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(control_plane.kubeconfig.read_text().replace(control_plane.server, "https://127.0.0.1:9"))
    spec = parse_spec(SPEC)
    cluster = KubernetesCluster(kubeconfig=str(kubeconfig), namespace=NAMESPACE)
    with pytest.raises(UserError, match=r"Kubernetes API server at https://127.0.0.1:9 unreachable: Connection "
                                        r"refused"):
        run_experiment(spec, KubernetesBackend(spec, cluster), None, tmp_path)
    with pytest.raises(UserError, match="no usable Kubernetes configuration"):
        KubernetesCluster(kubeconfig=str(tmp_path / "missing"), namespace=NAMESPACE)


def test_cli_names_the_pod_it_could_not_collect_from_and_restores(release, tmp_path: Path, capsys) -> None:
    """`aitax experiment run` (the CLI module's own click group) on kwok's pods, which run nothing: the phase
    scales, rolls out, then `aitax collect` cannot run in a consumer pod; once the rollout timeout has passed the
    command fails with one line naming the group, the pod and the command, and the release is restored. (The whole
    path on real pods: tests/cluster.)"""
    from aitax.commands import experiment as cli

    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        f"name: cli\nrelease: {RELEASE}\nnamespace: {NAMESPACE}\nphases:\n"
        "  - {name: up, duration: 1s, replicas: {identify: 3}}\n")
    argv = ["run", str(spec_file), "--backend", "kubernetes", "--kubeconfig", str(release.kubeconfig), "--out",
            str(tmp_path), "--rollout-timeout", "20"]
    with pytest.raises(UserError, match=r"^deployment/exp-aitax-identify: group identify not ready after 20 s "
                                        r"\(`env AITAX_KAFKA_TLS=/etc/aitax/reader aitax collect --group identify` in "
                                        r"pod/exp-aitax-identify-\S+ in "
                                        r"namespace aitax-test failed: .+"):
        # Not standalone: the UserError comes out as it is, not as click's exit.
        cli.experiment_group.main(argv, prog_name="aitax experiment", standalone_mode=False)
    assert "restored deployment/exp-aitax-identify -> 2" in capsys.readouterr().out
    assert _replicas(release)["identify"] == (2, 2)
    assert _env(release, "exp-aitax-identify")["AITAX_RUN_ID"] == "helm"


def test_uninstall_removes_the_release(control_plane) -> None:
    plane = control_plane
    helm("install", "gone", str(CHART), "-n", NAMESPACE, "--wait", "--timeout", "180s",
         "--set", "identify.gallery.base64=QUJD", "--set", "mode=real",
         "--set", "ingestDetect.video.createClaim.enabled=true", kubeconfig=plane.kubeconfig)
    assert _get(plane, "statefulset", "gone-aitax-kafka")["spec"]["replicas"] == 3
    helm("uninstall", "gone", "-n", NAMESPACE, "--wait", "--timeout", "120s", kubeconfig=plane.kubeconfig)
    left = [item["metadata"]["name"] for kind in ("deployments", "statefulsets", "services", "configmaps",
                                                  "networkpolicies", "pdb")
            for item in _get(plane, kind, "-l", "app.kubernetes.io/instance=gone")["items"]]
    assert left == []
    # The videos claim is kept on purpose (helm.sh/resource-policy: keep): uploaded videos survive.
    assert _get(plane, "pvc", "gone-aitax-videos")["metadata"]["name"] == "gone-aitax-videos"
    assert "gone" not in helm("list", "-n", NAMESPACE, "-q", kubeconfig=plane.kubeconfig).stdout.split()
