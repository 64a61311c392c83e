"""The chart without a cluster: lint, strict offline schema validation for Kubernetes 1.30+, the values schema,
the settings it shares with the local stack, and the Dockerfiles its images come from."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from aitax.common.paths import PROJECT_ROOT
from aitax.stack.config import StackConfig
from aitax.stack.kafka import Broker
from tests.k8s.conftest import CHART, CI_VALUES, helm, render, tool_path, validate_custom_resource

pytestmark = pytest.mark.k8s

KUBERNETES_VERSIONS = ("1.30.0", "1.33.0", "1.36.0")
# prometheus-operator's kinds have no schema in kubernetes-validate: checked against the operator's CRDs instead.
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor"}
STAGES = ("ingest-detect", "identify", "ingest", "detect", "detect-objects", "emulate-producers", "emulate-consumers")
DOCKERFILES = sorted((PROJECT_ROOT / "containers").glob("*/Dockerfile"))


def _by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def _stages(docs: list[dict]) -> list[dict]:
    """The stage Deployments: every Deployment but the dashboard's and Prometheus's (test_chart_security holds
    those)."""
    return [d for d in _by_kind(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"]
            not in ("dashboard", "prometheus")]


def _named(docs: list[dict], kind: str, suffix: str) -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix))


def _pod_specs(docs: list[dict]) -> list[dict]:
    specs = []
    for doc in docs:
        if doc["kind"] == "Pod":
            specs.append(doc["spec"])
        elif doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            specs.append(doc["spec"]["template"]["spec"])
    return specs


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_helm_lint_strict(values: Path) -> None:
    result = helm("lint", "--strict", str(CHART), "-f", str(values))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_rendered_manifests_validate_strictly_offline(values: Path) -> None:
    import kubernetes_validate

    docs = render(values)
    assert docs
    for version in KUBERNETES_VERSIONS:
        for doc in docs:
            if doc["kind"] in OPERATOR_KINDS:
                validate_custom_resource(doc)
                continue
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(f"{values.name}: {doc['kind']}/{doc['metadata']['name']} invalid for Kubernetes "
                            f"{version}: {error.message} at {'.'.join(map(str, error.path))}")


def test_strict_validation_catches_a_misspelled_field() -> None:
    """The check above is real: a typo that `helm lint` lets through is rejected."""
    import kubernetes_validate

    deployment = _named(render(CI_VALUES[0]), "Deployment", "-identify")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePullPolicyy"):
        kubernetes_validate.validate(deployment, "1.36.0", strict=True)


def test_operator_crd_validation_catches_a_misspelled_field() -> None:
    import jsonschema

    pod_monitor = _by_kind(render(CHART / "ci" / "production-values.yaml"), "PodMonitor")[0]
    validate_custom_resource(pod_monitor)
    pod_monitor["spec"]["podMetricsEndpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        validate_custom_resource(pod_monitor)


def test_operator_monitors_select_the_stage_pods() -> None:
    docs = render(CHART / "ci" / "production-values.yaml")
    service_monitor = _by_kind(docs, "ServiceMonitor")[0]
    pod_monitor = _by_kind(docs, "PodMonitor")[0]
    assert service_monitor["apiVersion"] == pod_monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(service_monitor["spec"]) == {"selector", "endpoints"}
    assert service_monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert service_monitor["metadata"]["labels"]["release"] == "prometheus"
    service = _named(docs, "Service", "-metrics")
    assert service["metadata"]["labels"].items() >= service_monitor["spec"]["selector"]["matchLabels"].items()
    selector = pod_monitor["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    for deployment in _stages(docs):
        assert deployment["spec"]["template"]["metadata"]["labels"].items() >= selector.items()
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


@pytest.mark.parametrize(
    ("assignment", "field"),
    [
        ("kafka.replicas=1", "/kafka/replicas"),
        ("mode=fast", "/mode"),
        ("kafka.imagePullPolicyy=Always", "imagePullPolicyy"),
        ("identify.resources.requests.cpu=lots", "/identify/resources/requests/cpu"),
        ("emulator.factor=0", "/emulator/factor"),
        ("emulator.accelerator=tpu", "/emulator/accelerator"),
        ("emulator.compute=gpu", "/emulator/compute"),
        ("emulator.producers.inFlight=0", "/emulator/producers/inFlight"),
        ("ingestDetect.pace=fastest", "/ingestDetect/pace"),
        ("ingestDetect.sharedMemory=lots", "/ingestDetect/sharedMemory"),
        ("kafka.antiAffinity=maybe", "/kafka/antiAffinity"),
        ("kafka.persistence.size=big", "/kafka/persistence/size"),
        ("topics.faces.retentionMs=1000", "/topics/faces/retentionMs"),
        ("metrics.port=80", "/metrics/port"),
        ("ingestDetect.video.url=not-a-url", "/ingestDetect/video/url"),
        ("kafka.clusterId=-starts-with-a-dash-xx", "/kafka/clusterId"),
        ("identify.replicas=-1", "/identify/replicas"),
        ("kafka.metrics.port=9092", "/kafka/metrics/port"),
        ("kafka.diskMeter.port=9404", "/kafka/diskMeter/port"),
        ("ingestDetect.cameras[0].name=lobby,ingestDetect.cameras[0].url=rtsp://ops:secret@cam/s",
         "/ingestDetect/cameras/0/url"),
        ("ingestDetect.cameras[0].name=Lobby_1,ingestDetect.cameras[0].url=rtsp://cam/s",
         "/ingestDetect/cameras/0/name"),
        ("identify.runtime=rocm", "/identify/runtime"),
        ("identify.gpus=-1", "/identify/gpus"),
    ],
)
def test_values_schema_rejects_bad_values_naming_the_field(assignment: str, field: str) -> None:
    result = helm("template", "t", str(CHART), "-f", str(CI_VALUES[0]), "--set", assignment, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert field in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("identify.gallery.base64=QUJD", "identify.gallery.existingSecret=s"), "identify.gallery: set at most one"),
        (("kafka.minInsyncReplicas=4",), "kafka.minInsyncReplicas (4) must not exceed kafka.replicationFactor (3)"),
        (("kafka.replicationFactor=4",), "kafka.replicationFactor (4) must not exceed kafka.replicas (3)"),
        (("elasticsearch.external.url=http://es:9200",), "elasticsearch: elasticsearch.external is given"),
        (("stages=3", "ingestDetect.cameras[0].name=lobby", "ingestDetect.cameras[0].url=rtsp://cam/s"),
         "ingestDetect.cameras: cameras are read by ingest-detect: two stages, Face Recognition"),
        (("workload=object-detection", "stages=3"),
         "stages: 3: object-detection has two stages (ingest, then detect-objects)"),
        (("mode=emulated", "stages=3", "emulator.producers.inFlight=2"),
         "emulator.producers.inFlight: a closed loop runs two stages, not stages: 3"),
        (("identify.runtime=cuda",), "identify.runtime: cuda runs on an NVIDIA GPU: set identify.gpus to 1 or more"),
        (("identify.gpus=1",), "identify.gpus: 1 GPU(s) that runtime openvino would not use"),
        (("ingestDetect.runtime=cuda",), "ingestDetect.runtime: cuda runs on an NVIDIA GPU: set ingestDetect.gpus"),
        (("stages=3", "ingestDetect.runtime=cuda", "ingestDetect.gpus=1"),
         "ingestDetect.gpus: with frames through Kafka ingest only decodes; detection's GPUs are detect.gpus"),
        (("ingestDetect.runtime=cuda", "ingestDetect.gpus=1", "ingestDetect.detector=yunet"),
         "ingestDetect.detector: yunet runs on the CPU (OpenCV); with runtime cuda set detector to mtcnn"),
    ],
)
def test_cross_field_errors_name_the_field(sets: tuple[str, ...], message: str) -> None:
    args = ["template", "t", str(CHART)]
    if not any(s.startswith("identify.gallery") for s in sets) and sets:
        args += ["-f", str(CI_VALUES[0])]
    for assignment in sets:
        args += ["--set", assignment]
    result = helm(*args, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


@pytest.mark.parametrize("component", ["-ingest-detect", "-identify"])
def test_a_gpu_stage_asks_for_its_gpus_runs_the_cuda_image_and_lands_on_gpu_nodes(component: str) -> None:
    gpu = _named(render(CHART / "ci" / "gpu-values.yaml"), "Deployment", component)["spec"]["template"]["spec"]
    cpu = _named(render(CI_VALUES[0]), "Deployment", component)["spec"]["template"]["spec"]
    container = gpu["containers"][0]
    assert container["image"] == "aitax/pipeline-gpu:0.1.0" and cpu["containers"][0]["image"] == "aitax/pipeline:0.1.0"
    assert container["args"][container["args"].index("--runtime") + 1] == "cuda"
    if component == "-ingest-detect":  # the paper's MTCNN by default, the detector a GPU runs
        assert container["args"][container["args"].index("--detector") + 1] == "mtcnn"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["limits"]["memory"] == cpu["containers"][0]["resources"]["limits"]["memory"]
    assert "nvidia.com/gpu" not in cpu["containers"][0]["resources"]["limits"]
    assert gpu["nodeSelector"] == {"nvidia.com/gpu.present": "true"} and "nodeSelector" not in cpu
    assert gpu["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_three_stage_detection_takes_its_gpus_in_detect_not_in_ingest() -> None:
    docs = render(CI_VALUES[0], sets=("stages=3", "detect.runtime=cuda", "detect.gpus=2"))
    detect = _named(docs, "Deployment", "-detect")["spec"]["template"]["spec"]["containers"][0]
    ingest = _named(docs, "Deployment", "-ingest")["spec"]["template"]["spec"]["containers"][0]
    assert detect["resources"]["limits"]["nvidia.com/gpu"] == 2 and detect["image"] == "aitax/pipeline-gpu:0.1.0"
    assert "--runtime" not in ingest["args"] and "nvidia.com/gpu" not in ingest["resources"]["limits"]


def test_kafka_statefulset_shape() -> None:
    docs = render(CHART / "ci" / "emulated-values.yaml", release="exp", namespace="lab")
    kafka = _named(docs, "StatefulSet", "-kafka")
    spec = kafka["spec"]
    assert spec["replicas"] == 3 and spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == "exp-aitax-kafka-headless"
    assert [t["metadata"]["name"] for t in spec["volumeClaimTemplates"]] == ["data-0", "data-1"]
    assert spec["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "50Gi"
    pod = spec["template"]["spec"]
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data-0,/var/lib/kafka/data-1"
    # Every probe on the client port: a broker-only pod (after a scale out) has no controller listener.
    assert {pod["containers"][0][probe]["tcpSocket"]["port"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe")} == {"kafka"}
    assert env["KAFKA_HOST_PATTERN"] == "exp-aitax-kafka-{ordinal}.exp-aitax-kafka-headless.lab.svc.cluster.local"
    assert re.fullmatch(r"[0-9a-f]{21}A", env["KAFKA_CLUSTER_ID"])
    # The cluster id is stable across renders (upgrades) and differs between releases.
    again = _named(render(CHART / "ci" / "emulated-values.yaml", release="exp", namespace="lab"), "StatefulSet",
                   "-kafka")
    assert again["spec"]["template"]["spec"]["containers"][0]["env"] == pod["containers"][0]["env"]
    other = _named(render(CI_VALUES[0], release="other", namespace="lab"), "StatefulSet", "-kafka")
    assert {e["name"]: e.get("value") for e in other["spec"]["template"]["spec"]["containers"][0]["env"]}[
        "KAFKA_CLUSTER_ID"] != env["KAFKA_CLUSTER_ID"]
    headless = _named(docs, "Service", "-kafka-headless")
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert _by_kind(docs, "PodDisruptionBudget")[0]["spec"]["maxUnavailable"] == 1


def test_brokers_serve_metrics_to_prometheus() -> None:
    docs = render(CI_VALUES[0])
    template = _named(docs, "StatefulSet", "-kafka")["spec"]["template"]
    container = template["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 9404, "protocol": "TCP"} in container["ports"]
    assert {"name": "KAFKA_METRICS_PORT", "value": "9404"} in container["env"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == "9404"
    # The PodMonitor/ServiceMonitor select pods by this label and scrape their port named "metrics".
    assert template["metadata"]["labels"]["aitax/metrics"] == "true"
    policy = _named(docs, "NetworkPolicy", "-kafka")
    assert {"ports": [{"port": "metrics", "protocol": "TCP"}]} in policy["spec"]["ingress"]

    off = _named(render(CI_VALUES[0], sets=("kafka.metrics.enabled=false",)), "StatefulSet", "-kafka")["spec"]
    container = off["template"]["spec"]["containers"][0]
    assert "metrics" not in [p["name"] for p in container["ports"]]
    assert "KAFKA_METRICS_PORT" not in [e["name"] for e in container["env"]]
    assert "prometheus.io/port" not in off["template"]["metadata"]["annotations"]


def test_beside_each_broker_a_disk_meter_reads_its_log_dirs_devices_without_privilege() -> None:
    docs = render(CI_VALUES[0], sets=("kafka.persistence.logDirs=2",))
    template = _named(docs, "StatefulSet", "-kafka")["spec"]["template"]
    broker, meter = template["spec"]["containers"]
    assert template["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == broker["name"]
    assert meter["name"] == "disks" and meter["command"] == [
        "aitax", "disk-meter", "--port", "9405", "--log-dir", "/var/lib/kafka/data-0", "--log-dir",
        "/var/lib/kafka/data-1"]
    # The same volumes as the broker's log dirs, read-only; the node's name for its series.
    assert {(m["name"], m["mountPath"], m["readOnly"]) for m in meter["volumeMounts"]} == {
        ("data-0", "/var/lib/kafka/data-0", True), ("data-1", "/var/lib/kafka/data-1", True)}
    assert meter["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    assert meter["securityContext"]["readOnlyRootFilesystem"] is True and meter["resources"]["limits"]["memory"]
    assert "readinessProbe" not in meter  # the broker's readiness is the broker's alone
    # Found by Prometheus through the headless Service's SRV records, open to it like the JMX exporter.
    assert {"name": "disk-metrics", "port": 9405, "targetPort": "disk-metrics"} in _named(
        docs, "Service", "-kafka-headless")["spec"]["ports"]
    assert {"ports": [{"port": "disk-metrics", "protocol": "TCP"}]} in _named(
        docs, "NetworkPolicy", "-kafka")["spec"]["ingress"]
    scrape = _named(docs, "ConfigMap", "-prometheus")["data"]["prometheus.yml"]
    assert "job_name: broker-disks" in scrape and "_disk-metrics._tcp.t-aitax-kafka-headless" in scrape
    # Calibrating writes into the log dirs: only then are they mounted writable.
    calibrating = _named(render(CI_VALUES[0], sets=("kafka.diskMeter.calibrate=true",)), "StatefulSet", "-kafka")
    meter = calibrating["spec"]["template"]["spec"]["containers"][1]
    assert "--calibrate" in meter["command"] and meter["volumeMounts"][0]["readOnly"] is False
    off = render(CI_VALUES[0], sets=("kafka.diskMeter.enabled=false",))
    assert len(_named(off, "StatefulSet", "-kafka")["spec"]["template"]["spec"]["containers"]) == 1
    assert "broker-disks" not in _named(off, "ConfigMap", "-prometheus")["data"]["prometheus.yml"]


def test_broker_settings_are_the_local_stacks() -> None:
    """The chart's broker properties are Broker.properties() minus what differs per pod (added by the image): the
    local stack's, TLS on by default with the broker's Secret at /etc/kafka/tls, and `--plaintext`'s with
    security.enabled=false."""
    per_pod = {"process.roles", "node.id", "controller.quorum.voters", "listeners", "advertised.listeners",
               "log.dirs"}
    mounted = {"ssl.keystore.location": "/etc/kafka/tls/keystore.pem",
               "ssl.truststore.location": "/etc/kafka/tls/ca.crt"}
    for sets, config in (((), StackConfig()), (("security.enabled=false",), StackConfig(tls=False))):
        local = {k: mounted.get(k, v) for k, v in Broker(1, config).properties().items() if k not in per_pod}
        configmap = _named(render(CI_VALUES[0], sets=sets), "ConfigMap", "-kafka")
        lines = configmap["data"]["server.properties"].strip().splitlines()
        chart = dict(line.split("=", 1) for line in lines)
        assert chart == local, sets


def _job_topics(docs: list[dict]) -> tuple[dict[str, tuple[int, str, dict[str, str]]], list[str]]:
    """The topics Job's --topic NAME:PARTITIONS:ROLE:SETTINGS as {name: (partitions, role, settings)}, and its
    arguments."""
    args = _named(docs, "Job", "-topics-1")["spec"]["template"]["spec"]["containers"][0]["args"]
    topics = {}
    for arg in (args[i + 1] for i, flag in enumerate(args) if flag == "--topic"):
        name, partitions, role, settings = arg.split(":", 3)
        topics[name] = (int(partitions), role, dict(entry.split("=", 1) for entry in settings.split(",")))
    return topics, args


def test_topics_are_the_local_stacks() -> None:
    docs = render(CI_VALUES[0])
    # Part of the release, not a hook (the stages' readiness waits for the topics), named by revision: a new one
    # runs at every upgrade.
    job = _named(docs, "Job", "-topics-1")
    assert "helm.sh/hook" not in job["metadata"].get("annotations", {})
    for values, frames, detections in ((CI_VALUES[0], False, False), (CHART / "ci" / "three-stage-values.yaml", True,
                                       False), (CHART / "ci" / "object-detection-values.yaml", True, True)):
        topics, args = _job_topics(render(values))
        local = {spec.name: (spec.partitions, spec.carries, spec.config)
                 for spec in StackConfig().topics(frames=frames, detections=detections)}
        assert topics == local, values
        assert args[:2] == ["cluster", "ensure-topics"]  # the local stack's code, in the emulator image
        assert args[args.index("--replication-factor") + 1] == "3"


def test_stage_containers_are_locked_down_and_get_one_cpu() -> None:
    for values in CI_VALUES:
        docs = render(values)
        for spec in _pod_specs(docs):
            if spec["containers"][0]["name"] == "elasticsearch":
                assert spec["securityContext"]["runAsNonRoot"] is True
            else:
                assert spec["securityContext"]["runAsNonRoot"] is True, values.name
                assert spec["securityContext"]["runAsUser"] != 0
            # only the secrets Job (its Role: Secrets in the namespace) and the release's Prometheus (finding its
            # targets, reading the kubelet's metrics) talk to the API server
            assert spec.get("automountServiceAccountToken") is (spec["serviceAccountName"] in (
                "t-aitax-issue-secrets", "t-aitax-prometheus"))
            for container in spec.get("initContainers", []) + spec["containers"]:
                context = container["securityContext"]
                assert context["readOnlyRootFilesystem"] is True, (values.name, container["name"])
                assert context["allowPrivilegeEscalation"] is False
                assert context["capabilities"]["drop"] == ["ALL"]
                assert container["resources"]["limits"], container["name"]
        for deployment in _stages(docs):
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            assert container["name"] in STAGES
            # At most one core, as in the paper; the default request is small so that a default install fits.
            assert container["resources"]["limits"]["cpu"] == "1"
            assert container["resources"]["requests"]["cpu"] in ("100m", "1")
            # Alive while it serves metrics; ready once it can work (telemetry.metrics: /ready after READY)
            for probe in ("startupProbe", "livenessProbe"):
                assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
            assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["AITAX_METRICS_PORT"] == "9400" and env["AITAX_METRICS_HOST"] == "0.0.0.0"
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert {"/opt/aitax/home/spool", "/tmp"} <= mounts  # writable places on a read-only root


def test_compute_threads_follow_each_stages_cpu_limit() -> None:
    """A core-scaling study on a cluster (the paper's Fig. 5) raises the CPU limit: the stage's TensorFlow,
    OpenVINO and OpenCV threads follow it, rounded up."""

    def threads(docs: list[dict], suffix: str) -> str:
        args = _named(docs, "Deployment", suffix)["spec"]["template"]["spec"]["containers"][0]["args"]
        return args[args.index("--threads") + 1]

    default = render(CI_VALUES[0])
    assert (threads(default, "-ingest-detect"), threads(default, "-identify")) == ("1", "1")
    scaled = render(CI_VALUES[0], sets=("ingestDetect.resources.limits.cpu=1500m", "identify.resources.limits.cpu=4"))
    assert (threads(scaled, "-ingest-detect"), threads(scaled, "-identify")) == ("2", "4")


def test_stage_deployments_per_mode() -> None:
    real = render(CI_VALUES[0])
    names = {d["metadata"]["name"]: d["spec"]["replicas"] for d in _stages(real)}
    assert names == {"t-aitax-ingest-detect": 1, "t-aitax-identify": 2}  # the paper's 2 identify per ingest-detect
    identify = _named(real, "Deployment", "-identify")["spec"]["template"]["spec"]["containers"][0]
    assert identify["args"][:3] == ["identify", "--gallery", "/etc/aitax/gallery/gallery.npz"]
    ingest = _named(real, "Deployment", "-ingest-detect")["spec"]["template"]["spec"]["containers"][0]
    assert ingest["args"][:5] == ["ingest-detect", "--video", "$(AITAX_VIDEO)", "--stream-id", "$(POD_NAME)"]
    assert "--loop" in ingest["args"]
    production = render(CHART / "ci" / "production-values.yaml")
    assert _named(production, "Deployment", "-identify")["spec"]["replicas"] == 8
    ingest = _named(production, "Deployment", "-ingest-detect")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in ingest["containers"][0]["env"]}
    assert env["AITAX_VIDEO"]["value"] == "rtsp://cameras.example.com/$(POD_NAME)"
    assert env["AITAX_ELASTICSEARCH_URL"]["valueFrom"]["secretKeyRef"] == {"name": "aitax-elasticsearch",
                                                                           "key": "url"}
    assert env["AITAX_EVENTS"]["value"] == "es:$(AITAX_ELASTICSEARCH_URL)"
    assert ingest["containers"][0]["image"] == "registry.example.com/vision/aitax/pipeline:0.1.0"
    emulated = render(CHART / "ci" / "emulated-values.yaml")
    deployments = {d["metadata"]["name"]: d for d in _stages(emulated)}
    assert set(deployments) == {"t-aitax-emulate-producers", "t-aitax-emulate-consumers"}
    producers = deployments["t-aitax-emulate-producers"]
    assert producers["spec"]["replicas"] == 2
    assert producers["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "emulate-producers", "--instances", "4", "--factor", "$(AITAX_ACCELERATION_FACTOR)", "--profile",
        "/etc/aitax/profile/profile.yaml", "--run-id", "$(AITAX_RUN_ID)", "--stream-prefix", "$(POD_NAME)"]
    assert "profile.yaml" in _named(emulated, "ConfigMap", "-emulator-profile")["data"]
    consumers = deployments["t-aitax-emulate-consumers"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert consumers[-2:] == ["--max-batch", "1"]
    # A device curve goes to every emulated stage (each process takes the curve of its own stage)
    device = render(CHART / "ci" / "emulated-values.yaml", sets=("emulator.accelerator=h200-bf16",
                                                                 "emulator.maxBatch=16"))
    for name, deployment in {d["metadata"]["name"]: d for d in _stages(device)}.items():
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--accelerator") + 1] == "h200-bf16", name
    consumers = _named(device, "Deployment", "-emulate-consumers")["spec"]["template"]["spec"]["containers"][0]
    assert consumers["args"][-2:] == ["--max-batch", "16"]
    # Compute that takes the pod's CPU instead of sleeping, on every emulated stage
    on_cpu = render(CHART / "ci" / "emulated-values.yaml", sets=("emulator.compute=cpu",))
    for name, deployment in {d["metadata"]["name"]: d for d in _stages(on_cpu)}.items():
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--compute") + 1] == "cpu", name
    # A closed loop: the producers' frames in flight, in the variable an experiment phase sets; none by default
    closed = render(CHART / "ci" / "emulated-values.yaml", sets=("emulator.producers.inFlight=3",))
    env = {name: {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
           for name, d in {d["metadata"]["name"]: d for d in _stages(closed)}.items()}
    assert env["t-aitax-emulate-producers"]["AITAX_IN_FLIGHT"] == "3"
    assert "AITAX_IN_FLIGHT" not in env["t-aitax-emulate-consumers"]
    assert all("AITAX_IN_FLIGHT" not in e["name"] for d in _stages(emulated)
               for e in d["spec"]["template"]["spec"]["containers"][0]["env"])


def test_a_video_files_frames_get_a_dev_shm_of_memory_and_cameras_and_split_ingest_none() -> None:
    def shm(docs: list[dict]) -> dict[str, tuple[dict | None, list[str]]]:
        found = {}
        for deployment in _stages(docs):
            pod = deployment["spec"]["template"]["spec"]
            volume = next((v for v in pod["volumes"] if v["name"] == "shm"), None)
            found[deployment["metadata"]["name"]] = (volume, [m["mountPath"] for m in pod["containers"][0][
                "volumeMounts"] if m["name"] == "shm"])
        return found

    default = shm(render(CI_VALUES[0]))
    assert default["t-aitax-ingest-detect"] == ({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit":
                                                                             "256Mi"}}, ["/dev/shm"])
    assert default["t-aitax-identify"] == (None, [])
    assert shm(render(CI_VALUES[0], sets=("ingestDetect.sharedMemory=",)))["t-aitax-ingest-detect"] == (None, [])
    for values in ("live-cameras-values.yaml", "three-stage-values.yaml"):  # frames through a pipe, or Kafka
        assert all(volume is None for volume, _ in shm(render(CHART / "ci" / values)).values()), values


def test_each_camera_gets_its_own_ingest_detect_with_its_password_from_a_secret() -> None:
    docs = render(CHART / "ci" / "live-cameras-values.yaml")
    deployments = {d["metadata"]["name"]: d for d in _stages(docs)}
    assert set(deployments) == {"t-aitax-ingest-detect-lobby", "t-aitax-ingest-detect-dock", "t-aitax-identify"}
    lobby = deployments["t-aitax-ingest-detect-lobby"]
    assert lobby["spec"]["replicas"] == 1
    assert lobby["spec"]["selector"]["matchLabels"]["aitax/camera"] == "lobby"  # selectors never overlap
    pod = lobby["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[:6] == ["ingest-detect", "--video", "rtsp://10.0.0.5:554/stream1", "--stream-id", "lobby",
                        "--transport"]
    assert args[args.index("--declared-fps") + 1] == "10"
    assert args[args.index("--camera-password-file") + 1] == "/etc/aitax/camera/password"
    assert "--loop" not in args and all("password" not in value for value in args if value.startswith("rtsp"))
    secret = next(volume for volume in pod["volumes"] if volume["name"] == "camera")["secret"]
    assert secret == {"secretName": "lobby-camera", "defaultMode": 0o440,
                      "items": [{"key": "password", "path": "password"}]}
    dock = deployments["t-aitax-ingest-detect-dock"]["spec"]["template"]["spec"]
    dock_args = dock["containers"][0]["args"]
    assert dock_args[dock_args.index("--transport") + 1] == "udp" and "--camera-user" not in dock_args
    assert all(volume["name"] != "camera" for volume in dock["volumes"])


def test_the_three_stage_design_and_object_detection_split_ingestion_off() -> None:
    """Frames through Kafka (the paper's Fig. 3a and Sec. 6): ingest pods only publish frames; detection reads
    them in its own Deployment, MTCNN for three-stage Face Recognition, CenterNet for Object Detection."""
    three = render(CHART / "ci" / "three-stage-values.yaml")
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in _stages(three)}
    assert replicas == {"t-aitax-ingest": 2, "t-aitax-detect": 2, "t-aitax-identify": 4}  # detect: one per ingest
    ingest = _named(three, "Deployment", "-ingest")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ingest[:5] == ["ingest", "--video", "$(AITAX_VIDEO)", "--stream-id", "$(POD_NAME)"]
    assert "--encoding" not in ingest and "--threads" not in ingest and "--keying" not in ingest
    detect = _named(three, "Deployment", "-detect")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert detect[:3] == ["detect", "--min-face-size", "20"] and "--threads" in detect
    objects = render(CHART / "ci" / "object-detection-values.yaml")
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in _stages(objects)}
    assert replicas == {"t-aitax-ingest": 2, "t-aitax-detect-objects": 3}  # no identify: nothing reads faces
    detect = _named(objects, "Deployment", "-detect-objects")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert detect == ["detect-objects", "--min-score", "0.4", "--threads", "1"]
    emulated = render(CHART / "ci" / "emulated-values.yaml", sets=("stages=3",))
    deployments = {d["metadata"]["name"]: d for d in _stages(emulated)}
    assert set(deployments) == {"t-aitax-emulate-producers", "t-aitax-emulate-detectors", "t-aitax-emulate-consumers"}
    args = {name: d["spec"]["template"]["spec"]["containers"][0]["args"] for name, d in deployments.items()}
    assert args["t-aitax-emulate-producers"][-2:] == ["--stages", "3"]
    # one emulated detect instance per emulated stream
    assert (deployments["t-aitax-emulate-detectors"]["spec"]["replicas"], args["t-aitax-emulate-detectors"][2]) == (
        deployments["t-aitax-emulate-producers"]["spec"]["replicas"], args["t-aitax-emulate-producers"][2])
    assert "frames" in _job_topics(emulated)[0]


def test_network_policy_admits_only_pipeline_pods_to_the_brokers() -> None:
    docs = render(CI_VALUES[0])
    policy = _named(docs, "NetworkPolicy", "-kafka")
    client_label = {"aitax/kafka-client": "t"}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    sources = [peer["podSelector"]["matchLabels"] for peer in policy["spec"]["ingress"][0]["from"]]
    assert client_label in sources
    assert [p["port"] for p in policy["spec"]["ingress"][1]["ports"]] == ["controller"]
    clients = [spec for spec in _pod_specs(docs) if spec["containers"][0]["name"] != "kafka"]
    # The secrets Job talks to the API server only; Prometheus scrapes the brokers' metrics port, open to all
    workloads = [d for d in docs if d["kind"] in ("Deployment", "Job") and not d["metadata"]["name"].endswith(
        ("-issue-secrets", "-prometheus"))]
    labelled = [d for d in workloads if d["spec"]["template"]["metadata"]["labels"].items() >= client_label.items()]
    assert len(labelled) == len(workloads) and clients
    test_pod = _by_kind(docs, "Pod")[0]
    assert test_pod["metadata"]["labels"].items() >= client_label.items()
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert test_pod["spec"]["containers"][0]["command"] == ["python", "-m", "aitax.experiment.kafka_probe"]


def test_kibana_job_and_bundled_elasticsearch() -> None:
    production = render(CHART / "ci" / "production-values.yaml")
    job = _named(production, "Job", "-kibana-import")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["kibana", "import", "--url", "https://kibana.example.com", "--space", "vision"]
    assert container["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "aitax-kibana", "key": "apiKey"}
    assert not [d for d in render(CI_VALUES[0]) if d["metadata"]["name"].endswith("-kibana-import")]
    lab = render(CHART / "ci" / "lab-values.yaml")
    elasticsearch = _named(lab, "StatefulSet", "-elasticsearch")
    assert elasticsearch["spec"]["replicas"] == 1
    identify = _named(lab, "Deployment", "-identify")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "AITAX_ELASTICSEARCH_URL", "value": "https://t-aitax-elasticsearch:9200"} in identify["env"]



def test_defaults_run_the_demo_from_the_image() -> None:
    """`helm install aitax charts/aitax` with no values: the demo video and gallery baked into the pipeline image,
    the bundled Elasticsearch for events, no claim to fill by hand."""
    docs = render()
    ingest = _named(docs, "Deployment", "-ingest-detect")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in ingest["containers"][0]["env"]}
    assert env["AITAX_VIDEO"] == "/opt/aitax/demo/video.mp4"
    assert "video" not in {v["name"] for v in ingest["volumes"]}
    assert not _by_kind(docs, "PersistentVolumeClaim")
    identify = _named(docs, "Deployment", "-identify")["spec"]["template"]["spec"]
    args = identify["containers"][0]["args"]
    assert args[args.index("--gallery") + 1] == "/opt/aitax/demo/gallery.npz"
    assert "gallery" not in {v["name"] for v in identify["volumes"]}
    assert {"name": "AITAX_ELASTICSEARCH_URL", "value": "https://t-aitax-elasticsearch:9200"} in \
        identify["containers"][0]["env"]
    # Given a gallery, it is mounted instead.
    given = _named(render(sets=("identify.gallery.existingSecret=g",)), "Deployment", "-identify")["spec"]
    args = given["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--gallery") + 1] == "/etc/aitax/gallery/gallery.npz"


# --- images -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint(dockerfile: Path) -> None:
    result = subprocess.run([str(tool_path("hadolint")), "--no-color", str(dockerfile)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfiles_are_pinned_and_non_root_and_leave_their_build_tools_behind() -> None:
    from aitax.cluster.images import BASES, IMAGES

    assert {p.parent.name for p in DOCKERFILES} == {"pipeline", "pipeline-gpu", "emulator", "kafka", "elasticsearch",
                                                    "prometheus"}
    # An image may also extend one that `aitax images build` makes (pipeline-gpu the pipeline), itself on a base.
    runtime_bases = {b.reference for b in BASES if not b.for_builds} | {i.reference for i in IMAGES}
    for dockerfile in DOCKERFILES:
        text = dockerfile.read_text()
        bases = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE) + re.findall(r"--mount=type=bind,from=([^,\s]+)", text)
        for base in bases:
            # No remote base: only the Debian bases `aitax images build` makes, at their current revision.
            assert base in {b.reference for b in BASES} | runtime_bases, \
                f"{dockerfile}: base image {base} is not an aitax base"
        final = text[text.rfind("\nFROM ") + 1:]
        assert final.split()[1] in runtime_bases, f"{dockerfile}: the image is not built on a runtime base"
        assert re.search(r"^USER 10001:10001$", final, re.MULTILINE), f"{dockerfile}: final stage not non-root"
        # No compiler or package manager run in the image, and no download cache in its layers: pip runs only with
        # its cache on a cache mount or switched off (the build base's CAs are mounted, never copied).
        assert not re.search(r"apt-get|apk |mvn |gcc", final), dockerfile
        for step in re.split(r"\n(?=[A-Z]+ )", final):
            if "pip install" in step:
                assert "--mount=type=cache,target=/root/.cache/pip" in step or step.count("pip install") == \
                    step.count("--no-cache-dir"), f"{dockerfile}: pip's cache would stay in a layer: {step[:80]}"


def test_image_names_and_tags_match_the_chart() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for name in ("pipeline", "emulator", "kafka", "prometheus"):
        text = (PROJECT_ROOT / "containers" / name / "Dockerfile").read_text()
        title = re.search(r'org\.opencontainers\.image\.title="([^"]+)"', text).group(1)
        version = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', text).group(1)
        assert values["images"][name]["repository"] == f"aitax/{name}" and title == f"aitax-{name}"
        assert (values["images"][name]["tag"] or chart["appVersion"]) == version
        assert f"-t aitax/{name}:{version} ." in text  # the documented build command
    text = (PROJECT_ROOT / "containers" / "elasticsearch" / "Dockerfile").read_text()
    version = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', text).group(1)
    assert values["elasticsearch"]["bundled"]["image"] == f"aitax/elasticsearch:{version}"
    assert f"-t aitax/elasticsearch:{version} ." in text


def test_every_dockerfile_is_built_by_aitax_images() -> None:
    from aitax.cluster.images import GPU_IMAGE, IMAGES, wanted_images

    assert {i.dockerfile for i in (*IMAGES, GPU_IMAGE)} == set(DOCKERFILES)
    assert GPU_IMAGE not in wanted_images(None) and wanted_images(None, gpu=True)[-1] == GPU_IMAGE
    assert wanted_images(["pipeline-gpu"]) == [GPU_IMAGE]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    references = {i.reference for i in (*IMAGES, GPU_IMAGE)}
    for name in ("pipeline", "pipelineGpu", "emulator", "kafka", "prometheus"):
        assert f"{values['images'][name]['repository']}:{values['images'][name]['tag'] or chart['appVersion']}" \
            in references
    assert values["elasticsearch"]["bundled"]["image"] in references


def test_emulator_image_pins_match_pyproject() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    pins = dict(re.match(r"([A-Za-z0-9_.-]+)==(\S+)", d).groups() for d in project["dependencies"])
    lines = (PROJECT_ROOT / "containers" / "emulator" / "requirements.txt").read_text().splitlines()
    emulator = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    for package, version in emulator.items():
        assert pins.get(package) == version, f"{package}=={version} differs from pyproject.toml"
    assert not {"tensorflow-cpu", "mtcnn", "opencv-python-headless"} & emulator.keys()


def test_kafka_image_uses_the_stacks_pinned_jars() -> None:
    text = (PROJECT_ROOT / "containers" / "kafka" / "Dockerfile").read_text()
    assert "COPY aitax/stack/maven/kafka-pom.xml pom.xml" in text
    assert "COPY aitax/stack/maven/kafka-log4j2.yaml" in text
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    pom = (PROJECT_ROOT / "aitax" / "stack" / "maven" / "kafka-pom.xml").read_text()
    assert f"<version>{chart['annotations']['aitax/kafka-version']}</version>" in pom


def test_fig15a_values_keep_the_load_and_its_services_on_the_clients_node_and_the_brokers_off_it() -> None:
    """benchmarks/fig15a.py taints node 5 aitax.io/clients: what tolerates it and is pinned there runs there alone."""
    docs = render(CHART / "ci" / "fig15a-values.yaml")
    placed = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"]["spec"]
              for d in docs if d["kind"] in ("Deployment", "StatefulSet")}
    for component in ("emulate-producers", "emulate-consumers", "elasticsearch", "prometheus"):
        spec = placed[component]
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": "aitax-node-5"}, component
        assert spec["tolerations"] == [{"key": "aitax.io/clients", "operator": "Exists", "effect": "NoSchedule"}]
    assert "tolerations" not in placed["kafka"] and "dashboard" not in placed
    assert _job_topics(docs)[0]["faces"][0] == 15  # even over 3 brokers and over 5
