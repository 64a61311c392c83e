"""The Kafka image's scripts, run for real: four `kafka-broker` entrypoints fed the chart's rendered ConfigMap and
StatefulSet environment form a KRaft cluster (three controllers and one broker-only pod, each on its own loopback
address, as pods on their own IPs), the topics Job's `aitax cluster ensure-topics` creates the chart's topics and
grants their ACLs, the `helm test` probe passes against them, and `kafka-rebalance-topics` moves replicas off a
leaving broker and back.

No container runtime runs here, so this is how the image's logic is exercised: same scripts, same jars (the local
stack's pinned Kafka 4.3.1), same settings the chart renders. `make test-k8s` runs them; `make test` does not, since
its real cluster runs the same scripts in pods (tests/cluster: brokers formed, topics Job, `helm test` probe, each
broker's metrics, the rebalance Job)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from aitax.common.paths import PROJECT_ROOT
from aitax.experiment.kafka_probe import run_probe
from aitax.pipeline.transport.security import TLS_ENV, KafkaTls, librdkafka_settings
from aitax.stack.security import ADMIN, BROKER, ELASTICSEARCH, issue_identities
from aitax.stack.stack import local_marker
from tests.k8s.conftest import CI_VALUES, render

pytestmark = [pytest.mark.k8s, pytest.mark.image_scripts]

BIN = PROJECT_ROOT / "containers" / "kafka" / "bin"
PORT_BASE = int(os.environ.get("AITAX_PORT_BASE", "19000"))
PORT, CONTROLLER_PORT, METRICS_PORT = PORT_BASE + 692, PORT_BASE + 693, PORT_BASE + 694
BROKERS = 4  # the chart's three controllers plus a broker-only pod, as after `kubectl scale --replicas=4`


def _host(ordinal: int) -> str:
    return f"127.0.0.{10 + ordinal}"  # the pattern "127.0.0.1{ordinal}" below


@pytest.fixture(scope="module")
def image_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from aitax.stack.kafka import LOG4J2_CONFIG, METRICS_CONFIG, TOOLS_LOG4J2_CONFIG, agents_dir, libs_dir

    if not (libs_dir() / ".complete").exists() or not (agents_dir() / ".complete").exists() \
            or shutil.which("java") is None:
        pytest.fail("Kafka jars or Java missing: run `make setup` (aitax stack install)")
    root = tmp_path_factory.mktemp("kafka-image")
    home = root / "opt-kafka"  # laid out as /opt/kafka in the image
    (home / "config").mkdir(parents=True)
    (home / "libs").symlink_to(libs_dir())
    (home / "agents").symlink_to(agents_dir())
    (home / "bin").symlink_to(BIN)
    shutil.copy(LOG4J2_CONFIG, home / "config" / "log4j2.yaml")
    shutil.copy(TOOLS_LOG4J2_CONFIG, home / "config" / "tools-log4j2.yaml")
    shutil.copy(METRICS_CONFIG, home / "config" / "kafka-metrics.yaml")
    docs = render(CI_VALUES[0], release="img", namespace="ns")
    configmap = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "img-aitax-kafka")
    # The identities the chart's secrets Job makes, for these brokers' names; the broker's Secret "mounted" here.
    pki = root / "pki"
    issue_identities(pki, {BROKER: tuple(_host(o) for o in range(BROKERS)), ELASTICSEARCH: ("localhost",)})
    base = root / "base-server.properties"
    base.write_text(configmap["data"]["server.properties"].replace("/etc/kafka/tls/", f"{pki / BROKER}/"))
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"].endswith("-kafka"))
    chart_env = {e["name"]: e["value"] for e in statefulset["spec"]["template"]["spec"]["containers"][0]["env"]
                 if "value" in e}
    job = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-topics-1"))
    bootstrap = ",".join(f"{_host(o)}:{PORT}" for o in range(3))
    processes = []
    for ordinal in range(BROKERS):
        node = root / f"broker-{ordinal}"
        env = {
            **os.environ,
            "KAFKA_HOME": str(home),
            "POD_NAME": f"img-aitax-kafka-{ordinal}",
            "KAFKA_CLUSTER_ID": chart_env["KAFKA_CLUSTER_ID"],
            "KAFKA_CONTROLLERS": chart_env["KAFKA_CONTROLLERS"],
            "KAFKA_HOST_PATTERN": "127.0.0.1{ordinal}",
            "KAFKA_BIND_ADVERTISED": "true",
            "KAFKA_PORT": str(PORT),
            "KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT),
            "KAFKA_METRICS_PORT": chart_env["KAFKA_METRICS_PORT"] and str(METRICS_PORT),
            "KAFKA_LOG_DIRS": f"{node}/data-0,{node}/data-1",
            "KAFKA_BASE_CONFIG": str(base),
            "KAFKA_GENERATED_CONFIG": str(node / "server.properties"),
            "KAFKA_HEAP_OPTS": "-Xms256m -Xmx384m",
        }
        node.mkdir()
        log = open(node / "broker.log", "wb")  # noqa: SIM115 - closed at teardown
        processes.append((subprocess.Popen([str(BIN / "kafka-broker")], env=env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True), log))
    given = os.environ.get(TLS_ENV)
    os.environ[TLS_ENV] = str(pki / ADMIN)  # the probe and the test's own clients: the admin, as the helm test
    os.environ.pop(local_marker(TLS_ENV), None)  # given, not the local stack's default
    try:
        yield {"root": root, "home": home, "bootstrap": bootstrap, "job": job, "pki": pki}
    finally:
        os.environ.pop(TLS_ENV) if given is None else os.environ.update({TLS_ENV: given})
        for process, _ in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, log in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def test_entrypoint_generates_per_pod_settings(image_cluster: dict) -> None:
    deadline = time.monotonic() + 30
    while not all((image_cluster["root"] / f"broker-{o}" / "server.properties").exists() for o in range(BROKERS)):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    props = dict(line.split("=", 1) for line in
                 (image_cluster["root"] / "broker-1" / "server.properties").read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    assert props["node.id"] == "1" and props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == ",".join(f"{o}@{_host(o)}:{CONTROLLER_PORT}" for o in range(3))
    assert props["advertised.listeners"] == f"SSL://{_host(1)}:{PORT}"
    assert props["listeners"] == f"SSL://{_host(1)}:{PORT},CONTROLLER://{_host(1)}:{CONTROLLER_PORT}"
    assert props["broker.session.timeout.ms"] == "3000" and props["min.insync.replicas"] == "2"


def test_topics_job_and_probe_against_the_image_cluster(image_cluster: dict) -> None:
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource

    container = image_cluster["job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:4:2] == ["cluster", "--bootstrap"]
    args = [*container["args"][:3], image_cluster["bootstrap"], *container["args"][4:]]  # the brokers here

    def ensure_topics() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "aitax.cli", *args], capture_output=True, text=True,
                              timeout=300, env=os.environ)  # as the admin ($AITAX_KAFKA_TLS), as in the Job

    # The Job runs after every broker pod is Ready (helm's --wait): here, once all four are registered, so the
    # topics' replicas spread over the broker-only one too.
    admin = AdminClient(librdkafka_settings(image_cluster["bootstrap"], {"log_level": 0}))

    def registered() -> list[int]:
        try:
            return sorted(admin.list_topics(timeout=5).brokers)
        except KafkaException:  # the cluster still forming
            return []

    started = time.monotonic()
    while len(registered()) < BROKERS:
        assert time.monotonic() - started < 120, f"brokers registered: {registered()}"
        time.sleep(1)
    result = ensure_topics()
    assert result.returncode == 0, result.stdout[-1500:] + result.stderr[-1500:]
    print(f"cluster formed and topics created in {time.monotonic() - started:.1f} s")
    metadata = admin.list_topics(timeout=10)
    assert sorted(metadata.brokers) == [0, 1, 2, 3]
    faces = metadata.topics["faces"]
    assert len(faces.partitions) == 12 and {len(p.replicas) for p in faces.partitions.values()} == {3}
    resource = ConfigResource(ConfigResource.Type.TOPIC, "faces")
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["message.timestamp.type"].value == "LogAppendTime"
    assert configs["min.insync.replicas"].value == "2"
    # Running it again (helm upgrade) is fine: existing topics just get their settings re-applied.
    again = ensure_topics()
    assert again.returncode == 0, again.stderr[-1500:]
    summary = run_probe(image_cluster["bootstrap"], "aitax.probe", replication_factor=3, min_insync=2,
                        timeout_s=60)
    assert summary.startswith("probe ok: aitax.probe@")
    assert summary.endswith("listeners SSL:SSL,CONTROLLER:SSL, client certificates required, "
                            "authorizer StandardAuthorizer")
    # The Job granted the stages their ACLs: identify may read faces, never write them.
    identify = KafkaTls(image_cluster["pki"] / "identify").confluent()
    producer = Producer({"bootstrap.servers": image_cluster["bootstrap"], "log_level": 0,
                         "message.timeout.ms": 10_000, **identify})
    delivered: list = []
    producer.produce("faces", b"x", on_delivery=lambda error, _: delivered.append(error and error.str()))
    producer.flush(15)
    assert delivered == ["Broker: Topic authorization failed"]


def test_every_broker_serves_its_metrics(image_cluster: dict) -> None:
    """The exporter agent the chart switches on (KAFKA_METRICS_PORT) answers on each broker's own address."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    active_controllers = 0.0
    for ordinal in range(BROKERS):
        deadline = time.monotonic() + 60
        while True:
            try:
                text = requests.get(f"http://{_host(ordinal)}:{METRICS_PORT}/metrics", timeout=5).text
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, f"broker {ordinal}: no metrics on port {METRICS_PORT}"
                time.sleep(1)
        samples = {sample.name: sample.value for family in text_string_to_metric_families(text)
                   for sample in family.samples if not sample.labels}
        assert samples["kafka_server_replicamanager_underreplicatedpartitions"] == 0
        assert samples["kafka_server_replicamanager_partitioncount"] > 0
        assert 0 <= samples["kafka_server_request_handler_idle_ratio"] <= 1
        assert "kafka_server_brokertopicmetrics_bytesin_total" in samples
        if ordinal < 3:  # controllers; the broker-only pod has no controller metrics
            active_controllers += samples["kafka_controller_activecontrollercount"]
        else:
            assert "kafka_controller_activecontrollercount" not in samples
    assert active_controllers == 1  # one KRaft leader among the three controllers


def _replica_brokers(bootstrap: str) -> dict[str, set[int]]:
    """The brokers holding replicas of each topic, and every partition's replica count (must stay 3)."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient(librdkafka_settings(bootstrap, {"log_level": 0})).list_topics(timeout=10)
    holders = {}
    for name, topic in metadata.topics.items():
        assert {len(p.replicas) for p in topic.partitions.values()} == {3}, name
        holders[name] = {broker for p in topic.partitions.values() for broker in p.replicas}
    return holders


def test_rebalance_moves_replicas_off_a_leaving_broker_and_onto_a_new_one(image_cluster: dict) -> None:
    env = {**os.environ, "KAFKA_HOME": str(image_cluster["home"]), "KAFKA_BOOTSTRAP": image_cluster["bootstrap"],
           "KAFKA_WAIT_TIMEOUT_S": "120", "KAFKA_TLS_DIR": str(image_cluster["pki"] / ADMIN)}

    def rebalance(brokers: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "kafka-rebalance-topics"), brokers], env=env, capture_output=True,
                              text=True, timeout=300)

    assert 3 in _replica_brokers(image_cluster["bootstrap"])["faces"]
    # Before `kubectl scale --replicas=3`: nothing may stay on broker 3.
    result = rebalance("3")
    assert result.returncode == 0, result.stderr[-1500:]
    assert "spread over brokers 0,1,2" in result.stdout
    holders = _replica_brokers(image_cluster["bootstrap"])
    assert all(brokers <= {0, 1, 2} for brokers in holders.values()), holders
    # After scaling back up: the new broker takes its share of every pipeline topic.
    result = rebalance("4")
    assert result.returncode == 0, result.stderr[-1500:]
    holders = _replica_brokers(image_cluster["bootstrap"])
    assert all(holders[topic] == {0, 1, 2, 3} for topic in ("faces", "identities", "faces.dlq")), holders
    assert rebalance("x").returncode == 2
