"""Object Detection (the paper's Sec. 6): the TF.js model rebuilt as TensorFlow finds people in labelled photos,
one `detections` record answers every frame (objects or not) through the shared detect loop, and a record reads
back onto the results' timeline. Kafka is faked here; the integration suite runs it on real brokers."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from aitax.common.errors import UserError
from aitax.pipeline.assets import Assets
from aitax.pipeline.ingest_detect import DetectStats, detect_loop
from aitax.pipeline.objects import COCO_CLASSES, ObjectDetector, ObjectRecords, _weights, frame_result
from aitax.pipeline.schema import DetectedObject, MalformedRecordError, decode_detections
from aitax.pipeline.stream import Frame
from aitax.pipeline.transport import DeliveryReport
from aitax.telemetry.events import Event


@pytest.fixture(scope="module")
def detector() -> ObjectDetector:
    return ObjectDetector()


def test_float16_weights_come_back_as_float32_in_manifest_order(tmp_path: Path) -> None:
    first, second = np.arange(6, dtype=np.float16).reshape(2, 3), np.array([7, 8], np.int32)
    (tmp_path / "w.bin").write_bytes(first.tobytes() + second.tobytes())
    manifest = [{"paths": ["w.bin"], "weights": [
        {"name": "a", "shape": [2, 3], "dtype": "float32", "quantization": {"dtype": "float16"}},
        {"name": "b", "shape": [2], "dtype": "int32"}]}]
    weights = _weights(tmp_path, manifest)
    assert weights["a"].dtype == np.float32 and weights["a"].tolist() == first.astype(np.float32).tolist()
    assert weights["b"].tolist() == [7, 8]
    (tmp_path / "w.bin").write_bytes(first.tobytes())  # cut short: the second weight is missing
    with pytest.raises(UserError, match="end before weight b"):
        _weights(tmp_path, manifest)


def test_people_are_found_in_labelled_photos_with_boxes_inside_them(detector: ObjectDetector,
                                                                   assets: Assets) -> None:
    photos = sorted(assets.faces_val_dir.glob("*/*.jpg"))
    found_person = 0
    for photo in photos:
        rgb = cv2.cvtColor(cv2.imread(str(photo)), cv2.COLOR_BGR2RGB)
        objects = detector(rgb)
        height, width = rgb.shape[:2]
        for found in objects:
            x, y, w, h = found.box
            assert found.label in COCO_CLASSES and detector.min_score <= found.score <= 1.0
            assert 0 <= x < x + w <= width and 0 <= y < y + h <= height
        found_person += any(found.label == "person" for found in objects)
    assert found_person >= 0.9 * len(photos), f"a person in {found_person} of {len(photos)} portraits"
    blank = np.full((540, 960, 3), 128, np.uint8)
    assert not [found for found in detector(blank) if found.score >= 0.5]


def test_a_record_answers_every_frame_and_reads_back_on_the_results_timeline() -> None:
    sent: list[tuple[str, bytes | None, bytes]] = []
    events: list[Event] = []

    class Producer:
        client_name = "fake"

        def send(self, topic, value, key=None, headers=None, on_delivery=None, opaque=None, partition=None) -> None:
            sent.append((topic, key, value))
            on_delivery(DeliveryReport(topic, 0, len(sent), None, opaque))

        def poll(self, timeout_s: float = 0.0) -> None: ...

        def flush(self, timeout_s: float = 30.0) -> int:
            return 0

    class Sink:
        enabled = True

        def emit(self, event: Event) -> None:
            events.append(event)

    found = {0: [DetectedObject("person", 0.9, (10, 20, 30, 40)), DetectedObject("dog", 0.5, (1, 2, 3, 4))], 1: []}
    frames = [Frame("cam-1", index, np.zeros((4, 4, 3), np.uint8), 100 + index, 200 + index, 1.0, 0.5,
                    50 + index) for index in (0, 1)]
    stats = detect_loop(frames, lambda rgb, watch: found[len(sent)], Producer(), Sink(), "run-1",
                        stats=DetectStats(), publication=ObjectRecords(), ingest_events=False)
    assert [topic for topic, _, _ in sent] == ["detections", "detections"]  # a frame with nothing is answered too
    assert stats.records == stats.acknowledged == 2 and stats.faces == 2 and stats.done_through("cam-1") == 1
    message = decode_detections(sent[0][2])
    assert sent[0][1] == b"cam-1" and message.objects == tuple(found[0]) and message.frame_index == 0
    assert [(event.object_count, event.face_count) for event in events] == [(2, None), (0, None)]
    result = frame_result(sent[1][2])
    timeline = result.timeline
    assert (timeline.scheduled_ns, timeline.captured_ns, timeline.ingested_ns) == (51, 101, 201)
    # no face detection in between: the frame's wait in Kafka is broker wait, detection stands in identify's place
    assert timeline.detect_start_ns == timeline.detected_ns == timeline.ingested_ns
    assert timeline.identify_start_ns <= timeline.identified_ns and result.objects == 0
    assert result.key == ("run-1", "cam-1", 1) and timeline.batch_size == 1


@pytest.mark.parametrize("document, reason", [
    ({"schema_version": 99}, "schema version 99"),
    ({"schema_version": 4, "objects": [{"label": "cat"}]}, "'score'"),
])
def test_a_malformed_detections_record_names_what_is_wrong(document: dict, reason: str) -> None:
    with pytest.raises(MalformedRecordError, match=reason):
        decode_detections(json.dumps(document).encode())
