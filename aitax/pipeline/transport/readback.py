"""A run read back from its topics once its consumers are idle: the faces the brokers acknowledged, the identities
they got (first of each face; duplicates counted), and a consumer group's state.

Everything reads a topic to its end as it stood when the read began, through one loop (`read_to_end`). The
module needs only the Kafka client (no OpenCV, no TensorFlow): `aitax collect` runs it inside an emulator pod,
where the brokers are reachable, and prints a `Collected` as one JSON line.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from aitax.common.errors import UserError
from aitax.pipeline.schema import IDENTITIES_TOPIC, MalformedRecordError, decode_face, decode_identity
from aitax.pipeline.transport.security import librdkafka_settings
from aitax.telemetry.latency import Timeline

COLLECTED_VERSION = 2  # 2: timelines carry the broker wait's edges, the delivery and the batch size
READ_TIMEOUT_S = 300.0  # a long-lived `faces` topic can hold gigabytes of thumbnails


def read_to_end(bootstrap: str, topic: str, timeout_s: float = READ_TIMEOUT_S,
                since_ms: int | None = None) -> Iterator[Any]:
    """Every record of `topic` (appended at or after `since_ms`, broker time, when given) up to the end offsets it
    had when the read began (confluent-kafka messages), read by a consumer of its own that commits nothing. A
    read that cannot reach every end within `timeout_s` is a UserError naming the topic: a partial read-back would
    count faces as lost."""
    from confluent_kafka import Consumer, TopicPartition

    # earliest: once retention has deleted old segments, offset 0 is out of range and would jump to the end
    consumer = Consumer(librdkafka_settings(bootstrap, {"group.id": f"readback-{time.time_ns()}",
                                                        "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                                        "log_level": 0}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {}
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                ends[partition] = high
        starts = [TopicPartition(topic, p, 0) for p in ends]
        if since_ms is not None and starts:
            # The first offset at or after the time (-1, the end, where nothing is that recent).
            found = consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in ends], timeout=10)
            starts = [TopicPartition(topic, f.partition, f.offset if f.offset >= 0 else ends[f.partition])
                      for f in found]
        remaining = {start.partition for start in starts if start.offset < ends[start.partition]}
        consumer.assign([start for start in starts if start.partition in remaining])
        deadline = time.monotonic() + timeout_s
        while remaining and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error() or message.partition() not in remaining:
                    continue
                if message.offset() + 1 >= ends[message.partition()]:
                    remaining.discard(message.partition())
                    consumer.pause([TopicPartition(topic, message.partition())])  # records past the snapshot
                yield message
        if remaining:
            raise UserError(f"{topic} at {bootstrap}: {len(remaining)} partition(s) not read to their end within "
                            f"{timeout_s:.0f} s")
    finally:
        consumer.close()


def count_records(bootstrap: str, topic: str) -> int:
    """Records ever appended to `topic` (its end offsets), read or not."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(librdkafka_settings(bootstrap, {"group.id": f"readback-{time.time_ns()}", "log_level": 0}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def read_identities(bootstrap: str, run_id: str, topic: str = IDENTITIES_TOPIC,
                    decode: Callable[[bytes, int], Any] = decode_identity, timeout_s: float = READ_TIMEOUT_S,
                    since_ms: int | None = None) -> tuple[list[Any], int]:
    """Every identity of the run (first of each face), and how many duplicates were published. `decode` reads
    another topic's results the same way (anything with `run_id` and `key`: Object Detection's frames). Each is
    decoded with its record's append time: when it became durable."""
    seen: dict[tuple, Any] = {}
    duplicates = 0
    for message in read_to_end(bootstrap, topic, timeout_s, since_ms):
        try:
            identity = decode(message.value(), message.timestamp()[1])
        except MalformedRecordError:
            continue
        if identity.run_id != run_id:
            continue
        if identity.key in seen:
            duplicates += 1
        else:
            seen[identity.key] = identity
    return list(seen.values()), duplicates


@dataclass(frozen=True)
class FaceTopic:
    """What a `faces` topic holds (of one run, when asked for one)."""

    faces: set[tuple]  # distinct face keys
    thumbnail_bytes: int  # of the distinct faces
    stall_s: float  # the longest gap between consecutive broker append times (of the run, when asked for one)

    @property
    def thumbnail_bytes_mean(self) -> float:
        return self.thumbnail_bytes / len(self.faces) if self.faces else 0.0


def read_face_topic(bootstrap: str, topic: str, run_id: str | None = None, since_ms: int | None = None) -> FaceTopic:
    faces: set[tuple] = set()
    thumbnail_bytes, appended = 0, []
    for message in read_to_end(bootstrap, topic, since_ms=since_ms):
        if run_id is None:
            appended.append(message.timestamp()[1])
        try:
            face = decode_face(message.value(), dict(message.headers() or []))
        except MalformedRecordError:
            continue
        if run_id is not None and face.meta.run_id == run_id:
            appended.append(message.timestamp()[1])  # the run's own appends: another run's quiet time is no stall
        if (run_id is None or face.meta.run_id == run_id) and face.key not in faces:
            faces.add(face.key)
            thumbnail_bytes += len(message.value() or b"")
    appended.sort()
    stall_s = max((b - a for a, b in itertools.pairwise(appended)), default=0) / 1000
    return FaceTopic(faces, thumbnail_bytes, stall_s)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GroupState(_Model):
    """A consumer group on one topic: ready when it is stable with every expected member holding partitions."""

    group: str
    topic: str
    state: str  # Kafka's: STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD, UNKNOWN
    members: int
    assigned: int  # members holding at least one partition of `topic`
    partitions: int  # of `topic`
    lag: int  # records of `topic` the group has not committed


class RunReadback(_Model):
    run_id: str
    produced_faces: int  # distinct faces of the run the brokers hold (each acknowledged to its producer)
    face_bytes_mean: float
    identified_faces: int
    duplicates: int
    timelines: list[Timeline]  # one per identified face
    stall_s: float = 0.0  # the longest gap between consecutive appends to `faces` while the run was read


class Collected(_Model):
    """What `aitax collect` prints (one JSON line)."""

    version: int = COLLECTED_VERSION
    group: GroupState | None = None
    readback: RunReadback | None = None


def group_state(bootstrap: str, group: str, topic: str, timeout_s: float = 10.0) -> GroupState:
    from confluent_kafka.admin import AdminClient

    from aitax.pipeline.transport.admin import group_lag, partition_count

    admin = AdminClient(librdkafka_settings(bootstrap, {"log_level": 0}))
    description = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result(timeout_s)
    assigned = sum(any(tp.topic == topic for tp in (member.assignment.topic_partitions if member.assignment else []))
                   for member in description.members)
    return GroupState(group=group, topic=topic, state=description.state.name, members=len(description.members),
                      assigned=assigned, partitions=partition_count(bootstrap, topic, timeout_s),
                      lag=group_lag(bootstrap, group, topic, timeout_s))


def read_run(bootstrap: str, run_id: str, faces_topic: str, identities_topic: str,
             since_ms: int | None = None) -> RunReadback:
    """The run's faces as the brokers hold them and its identities, compact enough to cross an exec stream.
    `since_ms`: the run began after this broker time (records before it are not read)."""
    faces = read_face_topic(bootstrap, faces_topic, run_id, since_ms)
    identities, duplicates = read_identities(bootstrap, run_id, topic=identities_topic, since_ms=since_ms)
    return RunReadback(run_id=run_id, produced_faces=len(faces.faces), face_bytes_mean=faces.thumbnail_bytes_mean,
                       identified_faces=len(identities), duplicates=duplicates,
                       timelines=[identity.timeline for identity in identities], stall_s=faces.stall_s)
