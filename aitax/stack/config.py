"""The local stack's shape: versions, ports and sizes, all on 127.0.0.1.

Ports are fixed offsets from `port_base` so several checkouts can run side by side (`AITAX_PORT_BASE`).
Heaps are sized so the whole stack fits a 2-core / 24 GiB machine with room for the pipeline.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aitax.common.errors import UserError
from aitax.pipeline.schema import DEFAULT_TOPICS, Topics

KAFKA_VERSION = "4.3.1"
ELASTICSEARCH_VERSION = "8.19.21"
MIN_BROKERS = 3  # replication factor 3 needs three brokers
MAX_BROKERS = 8  # the paper's largest broker count (Fig. 15)
MAX_CONTROLLERS = 3  # a KRaft quorum of three survives one failure; more only adds election traffic
HOST = "127.0.0.1"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    carries: str | None = None  # the `Topics` field it is, which says who may read and write it (stack.security)


@dataclass(frozen=True)
class Testbed:
    """A declared design scaled onto this machine (`stack.design`): every capacity is the design's divided by
    `scale`. The brokers' log dirs sit on drives of `drive_bytes_per_s` each (`stack.drives`), each broker runs in a
    CPU slice of `broker_cpu_cores` and the load in one of `client_cpu_cores` (`stack.cpu_slices`)."""

    design: str
    scale: float
    broker_cpu_cores: float
    client_cpu_cores: float
    drive_bytes_per_s: float  # each drive, written and read (block-layer throttle)
    dirty_bytes_per_drive: int  # the page cache's dirty budget for that drive, scaled with the design's memory
    link_mbit: float  # each node's link (recorded; local brokers share loopback, which is not shaped)
    drive_size_mb: int = 4096


@dataclass(frozen=True)
class StackConfig:
    brokers: int = 3
    log_dirs_per_broker: int = 1
    port_base: int = int(os.environ.get("AITAX_PORT_BASE", "19000"))
    kafka_heap_mb: int = 512
    elasticsearch_heap_mb: int = 512
    elasticsearch: bool = True
    prometheus: bool = True
    faces_partitions: int = 12
    # Thumbnails are personal data: keep them on the brokers only as long as a consumer may lag.
    faces_retention_ms: int = 3_600_000
    replication_factor: int = 3
    min_insync_replicas: int = 2
    # Mutual TLS and ACLs on every Kafka listener (stack.security); off only to measure what they cost, or where
    # something else terminates TLS
    tls: bool = True
    # Elasticsearch over https, a user and role per principal (stack.security); off with `tls`
    elasticsearch_tls: bool = True
    # None: the log dirs on this machine's own disk, every process sharing its cores
    testbed: Testbed | None = None

    def __post_init__(self) -> None:
        if not MIN_BROKERS <= self.brokers <= MAX_BROKERS:
            raise UserError(f"--brokers {self.brokers}: must be between {MIN_BROKERS} and {MAX_BROKERS}")
        if not 1 <= self.log_dirs_per_broker <= 4:
            raise UserError(f"--log-dirs-per-broker {self.log_dirs_per_broker}: must be between 1 and 4")
        if self.faces_retention_ms < 60_000:
            raise UserError(f"--faces-retention-ms {self.faces_retention_ms}: must be at least 60000 (1 min)")
        if not 1024 <= self.port_base <= 65535 - 1000:
            raise UserError(f"AITAX_PORT_BASE={self.port_base}: must be between 1024 and 64535")

    # Ports: brokers at base+91.., controllers at base+191.., broker metrics at base+391..,
    # Elasticsearch base+200/300, Prometheus base+90.
    def broker_port(self, node_id: int) -> int:
        return self.port_base + 90 + node_id

    def broker_metrics_port(self, node_id: int) -> int:
        return self.port_base + 390 + node_id

    def controller_port(self, node_id: int) -> int:
        return self.port_base + 190 + node_id

    @property
    def elasticsearch_port(self) -> int:
        return self.port_base + 200

    @property
    def elasticsearch_transport_port(self) -> int:
        return self.port_base + 300

    @property
    def prometheus_port(self) -> int:
        return self.port_base + 90

    @property
    def dashboard_port(self) -> int:
        return self.port_base + 80

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    @property
    def controller_ids(self) -> list[int]:
        return self.node_ids[:MAX_CONTROLLERS]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{HOST}:{self.broker_port(n)}" for n in self.node_ids)

    @property
    def elasticsearch_url(self) -> str:
        return f"{'https' if self.elasticsearch_tls else 'http'}://{HOST}:{self.elasticsearch_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{HOST}:{self.prometheus_port}"

    def topics(self, topics: Topics = DEFAULT_TOPICS, frames: bool = False, detections: bool = False
               ) -> list[TopicSpec]:
        """The pipeline's topics (with `frames`, also the three-stage design's and Object Detection's; with
        `detections`, Object Detection's results). Every topic keeps the brokers' append time (LogAppendTime): on
        `faces` and `frames` it splits a record's broker wait by owner, on `identities` and `detections` it is the
        moment a result became durable, where end to end ends (`telemetry.latency`). Frames show faces too: they
        live as briefly as thumbnails."""
        common = {"min.insync.replicas": str(self.min_insync_replicas), "message.timestamp.type": "LogAppendTime"}
        short_lived = {
            **common,
            "retention.ms": str(self.faces_retention_ms),
            # Retention only deletes closed segments: roll often enough that old thumbnails really go.
            "segment.ms": str(max(60_000, self.faces_retention_ms // 4)),
        }
        return [
            TopicSpec(topics.faces, self.faces_partitions, short_lived, "faces"),
            TopicSpec(topics.identities, 6, {**common, "retention.ms": str(7 * 24 * 3_600_000)}, "identities"),
            TopicSpec(topics.dlq, 3, short_lived, "dlq"),
            *([TopicSpec(topics.frames, self.faces_partitions, short_lived, "frames")] if frames else []),
            *([TopicSpec(topics.detections, 6, {**common, "retention.ms": str(7 * 24 * 3_600_000)}, "detections")]
              if detections else []),
        ]

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> StackConfig:
        try:
            # a stack described before TLS existed runs plaintext listeners
            described = {"tls": False, "elasticsearch_tls": False, **json.loads(path.read_text())}
            testbed = described.pop("testbed", None)
            return cls(**described, testbed=None if testbed is None else Testbed(**testbed))
        except (OSError, ValueError, TypeError) as error:
            raise UserError(f"{path}: unreadable stack description ({error}); run `make clean`") from error
