"""Poison records on the faces topic go to the dead-letter topic with a reason; the consumer carries on."""

from __future__ import annotations

import json
import os
import time

import cv2
import numpy as np
import pytest

from aitax.pipeline.identify import FaceNetIdentifier, IdentifyStats, identify_loop
from aitax.pipeline.schema import (
    DLQ_REASON_HEADER,
    DLQ_SOURCE_HEADER,
    META_HEADER,
    FaceMessage,
    FaceMeta,
    Match,
    Topics,
    decode_identity,
    encode_face,
)
from aitax.pipeline.transport import KAFKA_CLIENTS, make_consumer, make_producer
from aitax.pipeline.transport.admin import group_lag
from aitax.pipeline.transport.batcher import BatchPolicy
from aitax.stack import kafka
from aitax.stack.config import StackConfig
from aitax.telemetry.sinks import NullSink

pytestmark = pytest.mark.integration


class FirstPixelClassifier:
    """Stands in for FaceNet here: the thumbnail decoding, batching and Kafka path are what is under test."""

    weights_sha256 = "test"
    precision = "fp32"

    def embed(self, faces: np.ndarray) -> np.ndarray:
        return faces[:, 0, 0, :1].astype(np.float32)


class ByBrightness:
    def identify(self, embeddings: np.ndarray) -> list[Match]:
        return [Match(name, 1.0, name) for name in ("bright" if value > 127 else "dark" for value in embeddings[:, 0])]


def _thumbnail(value: int) -> bytes:
    ok, encoded = cv2.imencode(".png", np.full((160, 160, 3), value, np.uint8))
    assert ok
    return encoded.tobytes()


def _face(run_id: str, frame: int, thumbnail: bytes) -> FaceMessage:
    now = time.time_ns()
    meta = FaceMeta(run_id, "cam-1", frame, 0, 1, (10, 10, 50, 50), 0.99, "png", now, now, now, now, now, now)
    return FaceMessage(meta, thumbnail)


def _read_all(stack: StackConfig, topic: str, expected: int, group: str) -> list:
    consumer = make_consumer("confluent-kafka", stack.bootstrap_servers, group, [topic])
    records, deadline = [], time.monotonic() + 30
    while len(records) < expected and time.monotonic() < deadline:
        records += consumer.poll_batch(100, 1.0)
    consumer.close()
    return records


@pytest.mark.parametrize("client", KAFKA_CLIENTS)
def test_poison_records_are_dead_lettered_and_good_ones_identified(stack: StackConfig, unique_name: str,
                                                                   client: str) -> None:
    topics = Topics.with_prefix(f"{unique_name}-")
    kafka.ensure_topics(stack, stack.topics(topics))
    run_id = unique_name
    producer = make_producer("confluent-kafka", stack.bootstrap_servers)
    good = [_face(run_id, 0, _thumbnail(250)), _face(run_id, 1, _thumbnail(5))]
    _key, value, headers = encode_face(_face(run_id, 2, b"not a png at all"))
    wrong_version = {**headers, "aitax.schema": b"7"}
    bad_meta = {**headers, META_HEADER: json.dumps({"run_id": run_id}).encode()}
    poison = [
        (os.urandom(512), {}),  # random bytes, no headers
        (value, wrong_version),
        (value, bad_meta),
        (b"x" * (1024 * 1024 + 10), headers),  # oversized thumbnail
        (value, headers),  # valid metadata, thumbnail that does not decode
    ]
    # One good face, the five poison records, then another good face: the consumer must get past the poison.
    records = [encode_face(good[0])[1:], *poison, encode_face(good[1])[1:]]
    for record_value, record_headers in records:
        producer.send(topics.faces, record_value, key=b"cam-1", headers=record_headers)
    assert producer.flush(30) == 0

    # The identify side on each client: its pipelined commits and revoke listener are client-specific code.
    consumer = make_consumer(client, stack.bootstrap_servers, f"{unique_name}-identify", [topics.faces])
    results_producer = make_producer(client, stack.bootstrap_servers)
    deadline = time.monotonic() + 60
    stats = IdentifyStats()
    identify_loop(consumer, results_producer, FaceNetIdentifier(FirstPixelClassifier(), ByBrightness()), NullSink(),
                  lambda: stats.faces + stats.dead_letters >= 7 or time.monotonic() > deadline, topics=topics,
                  stats=stats)
    consumer.close()
    assert (stats.faces, stats.dead_letters) == (2, 5)
    assert group_lag(stack.bootstrap_servers, f"{unique_name}-identify", topics.faces) == 0  # all committed

    identities = [decode_identity(r.value) for r in _read_all(stack, topics.identities, 2, f"{unique_name}-read")]
    assert sorted((i.frame_index, i.identity) for i in identities) == [(0, "bright"), (1, "dark")]
    dead = _read_all(stack, topics.dlq, 5, f"{unique_name}-dlq")
    reasons = sorted(r.headers[DLQ_REASON_HEADER].decode() for r in dead)
    assert len(reasons) == 5
    assert any("missing header aitax.schema" in r for r in reasons)
    assert any("schema version" in r for r in reasons)
    assert any("field" in r and "missing" in r for r in reasons)
    assert any("exceeds" in r for r in reasons)
    assert any("does not decode" in r for r in reasons)
    assert all(r.headers[DLQ_SOURCE_HEADER].startswith(f"{topics.faces}/".encode()) for r in dead)


def test_a_rebalance_mid_stream_loses_nothing_and_duplicates_nothing(stack: StackConfig, unique_name: str) -> None:
    """A second identify consumer joins while the first is busy: the first commits what it finished in the
    revoke callback, so the newcomer starts exactly there (no face lost, none identified twice)."""
    import threading
    from dataclasses import replace

    from aitax.pipeline.transport.readback import read_identities

    topics = Topics.with_prefix(f"{unique_name}-")
    kafka.ensure_topics(stack, replace(stack, faces_partitions=4).topics(topics))
    producer = make_producer("confluent-kafka", stack.bootstrap_servers)
    faces = 300
    for frame in range(faces):
        key, value, headers = encode_face(_face(unique_name, frame, b"thumbnail"))
        producer.send(topics.faces, value, key=key, headers=headers)
    assert producer.flush(30) == 0

    def slow_identify(batch, watch):
        time.sleep(0.03 * len(batch))
        return [Match("someone", 1.0, "someone") for _ in batch]

    stats = [IdentifyStats(), IdentifyStats()]
    deadline = time.monotonic() + 90

    def done() -> bool:
        return sum(s.faces for s in stats) >= faces or time.monotonic() > deadline

    def identify(index: int) -> None:
        consumer = make_consumer("confluent-kafka", stack.bootstrap_servers, f"{unique_name}-g", [topics.faces])
        results = make_producer("confluent-kafka", stack.bootstrap_servers)
        try:
            identify_loop(consumer, results, slow_identify, NullSink(), done, batching=BatchPolicy(max_batch=4),
                          stats=stats[index], topics=topics)
        finally:
            consumer.close()
            results.close()

    first = threading.Thread(target=identify, args=(0,))
    first.start()
    while stats[0].faces < 40 and time.monotonic() < deadline:  # the first is well into the stream
        time.sleep(0.05)
    second = threading.Thread(target=identify, args=(1,))
    second.start()
    first.join()
    second.join()
    identities, duplicates = read_identities(stack.bootstrap_servers, unique_name, topic=topics.identities)
    assert len(identities) == faces, (len(identities), stats)
    assert duplicates == 0 and stats[0].duplicates + stats[1].duplicates == 0
    assert stats[0].faces >= 40 and stats[1].faces > 0  # both worked: the group really was rebalanced
