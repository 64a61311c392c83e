"""Real Apache Kafka brokers in KRaft mode on 127.0.0.1, from jars resolved on Maven Central."""

from __future__ import annotations

import base64
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from aitax.common.daemons import ManagedProcess, require_free_port
from aitax.common.errors import UserError
from aitax.common.paths import downloads_dir, stack_dir
from aitax.stack import prometheus
from aitax.stack.config import HOST, KAFKA_VERSION, StackConfig, TopicSpec

MAVEN_DIR = Path(__file__).with_name("maven")
POM = MAVEN_DIR / "kafka-pom.xml"
LOG4J2_CONFIG = MAVEN_DIR / "kafka-log4j2.yaml"
TOOLS_LOG4J2_CONFIG = MAVEN_DIR / "kafka-tools-log4j2.yaml"
# The Prometheus JMX exporter: a Java agent in each broker serving the rules' metrics on its metrics port.
METRICS_AGENT = "jmx_prometheus_javaagent"
METRICS_CONFIG = MAVEN_DIR / "kafka-metrics.yaml"


def libs_dir() -> Path:
    return downloads_dir() / f"kafka-{KAFKA_VERSION}" / "libs"


def agents_dir() -> Path:
    return downloads_dir() / f"kafka-{KAFKA_VERSION}" / "agents"


def metrics_agent_jar() -> Path:
    return agents_dir() / f"{METRICS_AGENT}.jar"


def install() -> None:
    """Resolve the broker and tools jars, and apart from them the metrics agent, once; later calls find them."""
    _copy_dependencies(libs_dir(), f"-DexcludeArtifactIds={METRICS_AGENT}")
    _copy_dependencies(agents_dir(), f"-DincludeArtifactIds={METRICS_AGENT}", "-Dmdep.stripVersion=true")


def _copy_dependencies(target: Path, *selection: str) -> None:
    marker = target / ".complete"
    if marker.exists():
        return
    require_java()
    if shutil.which("mvn") is None:
        raise UserError("Maven (`mvn`) not found: run `make setup`, which installs it")
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", "-DincludeScope=runtime",
         f"-DoutputDirectory={target}", *selection],
        check=True,
    )
    marker.touch()


def require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise UserError("Java not found on PATH: Kafka and Elasticsearch need a Java 17+ runtime (`make setup`)")
    return java


@dataclass(frozen=True)
class Broker:
    """One broker's files and process. Several log dirs stand for several drives (the paper's Fig. 15a)."""

    node_id: int
    config: StackConfig

    @property
    def home(self) -> Path:
        return stack_dir() / "kafka" / f"broker-{self.node_id}"

    @property
    def log_dirs(self) -> list[Path]:
        return [self.home / f"data-{drive}" for drive in range(1, self.config.log_dirs_per_broker + 1)]

    @property
    def properties_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess(
            name=f"kafka-{self.node_id}",
            pid_file=stack_dir() / "run" / f"kafka-{self.node_id}.pid",
            log_file=self.home / "broker.log",
            cmdline_marker=str(self.properties_file),
        )

    @property
    def port(self) -> int:
        return self.config.broker_port(self.node_id)

    @property
    def metrics_port(self) -> int:
        return self.config.broker_metrics_port(self.node_id)

    @property
    def metrics_target(self) -> str:
        """Its name in Prometheus's file service discovery."""
        return f"kafka-{self.node_id}"

    def require_free_ports(self) -> None:
        require_free_port(self.port, f"kafka broker {self.node_id}")
        require_free_port(self.metrics_port, f"kafka broker {self.node_id} metrics")
        if self.node_id in self.config.controller_ids:
            require_free_port(self.config.controller_port(self.node_id), f"kafka controller {self.node_id}")

    def properties(self) -> dict[str, str]:
        config = self.config
        is_controller = self.node_id in config.controller_ids
        protocol = "SSL" if config.tls else "PLAINTEXT"  # also the client listener's name
        listeners = [f"{protocol}://{HOST}:{self.port}"]
        if is_controller:
            listeners.append(f"CONTROLLER://{HOST}:{config.controller_port(self.node_id)}")
        voters = ",".join(f"{n}@{HOST}:{config.controller_port(n)}" for n in config.controller_ids)
        rf, isr = str(config.replication_factor), str(config.min_insync_replicas)
        return {
            "process.roles": "broker,controller" if is_controller else "broker",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "advertised.listeners": f"{protocol}://{HOST}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            # One client listener, which the brokers replicate over too, and the controllers' own: no plaintext
            # port is left open when TLS is on.
            "listener.security.protocol.map": f"{protocol}:{protocol},CONTROLLER:{protocol}",
            "inter.broker.listener.name": protocol,
            **(self._tls_properties() if config.tls else {}),
            "log.dirs": ",".join(str(d) for d in self.log_dirs),
            "num.partitions": "6",
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            # Fence a dead broker in ~3 s instead of 9: acks=all writers stall for seconds, not 10+.
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
            # Two shared cores: fewer threads than Kafka's server-sized defaults.
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.replica.fetchers": "1",
            # Deleted test topics free their disk quickly.
            "file.delete.delay.ms": "1000",
            "message.max.bytes": str(2 * 1024 * 1024),
        }

    def _tls_properties(self) -> dict[str, str]:
        """Mutual TLS on every listener: a client is its certificate's CN (`User:identify`), and allowed only what
        the ACLs grant it (`stack.security`); the brokers and the admin are super users."""
        from aitax.stack.security import ADMIN, BROKER, java_client_properties

        return {
            **{key: value for key, value in java_client_properties(BROKER).items() if key.startswith("ssl.")},
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([a-zA-Z0-9._-]+),.*$/$1/,DEFAULT",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{BROKER};User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def write_config(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.properties().items()]
        header = "# generated by `aitax stack up`; edits are overwritten\n"
        self.properties_file.write_text(header + "\n".join(lines) + "\n")

    def is_formatted(self) -> bool:
        return all((d / "meta.properties").exists() for d in self.log_dirs)

    def format_storage(self, cluster_id: str) -> None:
        run_tool(
            "kafka.tools.StorageTool",
            ["format", "-t", cluster_id, "-c", str(self.properties_file), "--ignore-formatted"],
            heap_mb=128,
        )

    def start(self) -> int:
        """Start the broker; returns its PID."""
        heap = f"-Xmx{self.config.kafka_heap_mb}m"
        argv = [
            require_java(),
            f"-Xms{self.config.kafka_heap_mb // 2}m",
            heap,
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            # Every JIT compiler thread from the start, none added later: a testbed moves them out of the broker's
            # CPU slice once (stack.cpu_slices.move_compilers).
            "-XX:-UseDynamicNumberOfCompilerThreads",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            f"-javaagent:{metrics_agent_jar()}={HOST}:{self.metrics_port}:{METRICS_CONFIG}",
            "-cp",
            f"{libs_dir()}/*",
            "kafka.Kafka",
            str(self.properties_file),
        ]
        pid = self.process.start(argv, cwd=self.home)
        prometheus.register_target(self.metrics_target, self.metrics_port,
                                   {"role": "kafka-broker", "broker": str(self.node_id)})
        return pid


def brokers(config: StackConfig) -> list[Broker]:
    return [Broker(node_id, config) for node_id in config.node_ids]


def tool_command(main_class: str, args: list[str], heap_mb: int = 256) -> list[str]:
    """The command line of one of Kafka's command-line tools (same jars as the brokers)."""
    return [
        require_java(),
        f"-Xmx{heap_mb}m",
        f"-Dlog4j2.configurationFile={TOOLS_LOG4J2_CONFIG}",
        "-cp",
        f"{libs_dir()}/*",
        main_class,
        *args,
    ]


def run_tool(main_class: str, args: list[str], heap_mb: int = 256) -> str:
    """Run one of Kafka's command-line tools and return its output."""
    result = subprocess.run(tool_command(main_class, args, heap_mb), capture_output=True, text=True)
    if result.returncode != 0:
        raise UserError(f"{main_class} {' '.join(args[:2])} failed: {result.stderr.strip().splitlines()[-1:]}")
    return result.stdout


def admin_settings(config: StackConfig) -> dict[str, str]:
    """librdkafka settings of the stack's own admin client: the admin principal when TLS is on."""
    settings = {"bootstrap.servers": config.bootstrap_servers, "log_level": "0"}
    if config.tls:
        from aitax.pipeline.transport.security import KafkaTls, tls_from_environment
        from aitax.stack.security import ADMIN, identity

        # the admin's of this state folder, else (a state folder of its own, the stack elsewhere) the operator
        # identity this process was given
        own = identity(ADMIN)
        settings |= (KafkaTls(own) if own.is_dir() else tls_from_environment() or KafkaTls(own)).confluent()
    return settings


def tool_client_args(config: StackConfig) -> list[str]:
    """`--command-config FILE` for one of Kafka's tools to connect as the admin, when TLS is on."""
    if not config.tls:
        return []
    from aitax.stack.security import ADMIN, java_client_properties

    path = stack_dir() / "kafka" / "admin-client.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in java_client_properties(ADMIN).items()))
    return ["--command-config", str(path)]


def cluster_id_file() -> Path:
    return stack_dir() / "kafka" / "cluster.id"


def cluster_id() -> str:
    """The KRaft cluster id, made once per stack (Kafka's own format: 16 random bytes, URL-safe base64)."""
    path = cluster_id_file()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        cluster = "-"
        while cluster.startswith("-"):  # as Kafka's own Uuid: a leading dash would read as a CLI option
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        path.write_text(cluster + "\n")
    return path.read_text().strip()


@dataclass(frozen=True)
class ClusterHealth:
    brokers_in_metadata: list[int]
    under_replicated: list[str]  # "topic/partition" whose ISR is smaller than its replica set
    error: str | None = None
    # "topic/partition" led by another broker than its first replica: the controller's periodic rebalance
    # (auto.leader.rebalance.enable, every 5 min) will move them, stalling acks=all writers for half a second
    off_preferred: list[str] = field(default_factory=list)

    def healthy(self, expected_brokers: list[int]) -> bool:
        return self.error is None and sorted(self.brokers_in_metadata) == expected_brokers and not self.under_replicated


def cluster_health(config: StackConfig, timeout_s: float = 5.0) -> ClusterHealth:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(admin_settings(config))
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as error:
        return ClusterHealth([], [], error=str(error.args[0]))
    partitions = [(f"{topic.topic}/{partition.id}", partition)
                  for topic in metadata.topics.values() for partition in topic.partitions.values()]
    under_replicated = [name for name, partition in partitions if len(partition.isrs) < len(partition.replicas)]
    off_preferred = [name for name, partition in partitions
                     if partition.replicas and partition.leader != partition.replicas[0]]
    return ClusterHealth(sorted(metadata.brokers), sorted(under_replicated), off_preferred=sorted(off_preferred))


def elect_preferred_leaders(config: StackConfig, timeout_s: float = 30.0) -> dict[str, str]:
    """Every partition back to its preferred leader now, as the controller's periodic rebalance would do up to 5
    minutes later, in the middle of whatever runs then: brokers that start one after another leave the first one
    leading nearly everything (measured: 48 leaders moved 5 min after `stack up`, a demo's writes stalled 0.6 s).
    Returns the partitions whose election failed, with why."""
    from confluent_kafka import ElectionType, KafkaError
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(admin_settings(config))
    # confluent-kafka 2.16.1 refuses every keyword argument of elect_leaders (its C binding's format string is
    # short of one): the client's own timeouts apply
    elections = admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout_s)
    return {f"{p.topic}/{p.partition}": str(error.args[0]) for p, error in elections.items()
            if error is not None and error.args[0].code() != KafkaError.ELECTION_NOT_NEEDED}


def ensure_topics(config: StackConfig, specs: list[TopicSpec] | None = None, timeout_s: float = 30.0) -> None:
    """Create missing topics (RF 3, min.insync 2) and bring existing ones to the configured settings; retried with
    a fresh client on transient errors (`retry_transient`: a stack just started)."""
    from confluent_kafka import KafkaException

    from aitax.pipeline.transport.admin import retry_transient

    specs = config.topics() if specs is None else specs
    try:
        retry_transient(lambda: _ensure_topics_once(config, specs, timeout_s), timeout_s)
    except KafkaException as exception:
        raise UserError(f"creating topics {[s.name for s in specs]} failed: {exception.args[0]}") from exception


def _ensure_topics_once(config: StackConfig, specs: list[TopicSpec], timeout_s: float) -> None:
    from confluent_kafka.admin import AdminClient

    ensure_topics_with(AdminClient(admin_settings(config)), specs, config.replication_factor, config.tls, timeout_s)


def grant_acls(admin, topics: list[tuple[str, str | None]], timeout_s: float) -> None:
    """Each principal's ACLs on (topic name, the `Topics` field it carries) pairs and on its groups, through an
    admin client (`stack.security.acl_bindings`): the local stack's topic creation and the chart's topics Job."""
    from aitax.stack.security import acl_bindings

    # librdkafka times the request out itself: a timeout is a KafkaException that `retry_transient` retries
    for future in admin.create_acls(acl_bindings(topics), request_timeout=timeout_s).values():
        future.result()  # creating an ACL that exists is a no-op


def ensure_topics_with(admin, specs: list[TopicSpec], replication_factor: int, acls: bool, timeout_s: float) -> None:
    """One attempt, through an admin client: the local stack's `ensure_topics` and the chart's topics Job
    (`aitax cluster ensure-topics`). `acls`: also each principal's ACLs on them (brokers with TLS), granted before
    any topic is created: a stage waits for its topics to exist, so that once they do, its ACLs are in force too
    (the metadata log applies them in order). Granted after, a stage that started fast was refused in between:
    identify's idempotent producer, refused once, is refused for good."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    if acls:
        grant_acls(admin, [(s.name, s.carries) for s in specs], timeout_s)
    existing = admin.list_topics(timeout=timeout_s).topics
    missing = [s for s in specs if s.name not in existing]
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(
                    s.name, num_partitions=s.partitions, replication_factor=replication_factor, config=s.config
                )
                for s in missing
            ],
            operation_timeout=timeout_s,
        )
        for future in futures.values():
            exception = future.exception()
            if exception is not None and exception.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise exception  # a race with another creator is fine; anything else is the caller's to judge
    for spec in specs:
        if spec.name in existing and spec.config:
            resource = ConfigResource(
                ConfigResource.Type.TOPIC,
                spec.name,
                incremental_configs=[
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in spec.config.items()
                ],
            )
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(timeout=timeout_s)


def describe_topic_configs(config: StackConfig, topic: str, timeout_s: float = 10.0) -> dict[str, str]:
    """A topic's effective configuration as the brokers report it."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(admin_settings(config))
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=timeout_s)
    return {name: entry.value for name, entry in entries.items()}
