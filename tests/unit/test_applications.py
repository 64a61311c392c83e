"""Applications are data: every description names real commands and topics, and a third application added to the
registry runs through the local load, the printer and the workload's validation without code that names it."""

from __future__ import annotations

import dataclasses
import string
from pathlib import Path

import pytest

from aitax.emulation.profile import BUILT_IN
from aitax.load import local
from aitax.load.local import LocalLoad
from aitax.pipeline.schema import Topics
from aitax.runs import applications
from aitax.runs.applications import APPLICATIONS, RUN_VALUES, Application, Emulated, Stage
from aitax.runs.results import Driver, Workload
from tests.command_line import find, parse

TOPIC_FIELDS = {field.name for field in dataclasses.fields(Topics)}


def _stages(app: Application) -> list[Stage]:
    return [app.producer, app.consumer, *(app.split or ())]


@pytest.mark.parametrize("app", APPLICATIONS.values(), ids=lambda app: app.name)
def test_every_description_names_real_commands_topics_values_and_profiles(app: Application) -> None:
    for stage in _stages(app):
        assert find([stage.command]), stage
        assert stage.reads is None or stage.reads in TOPIC_FIELDS, stage
        assert (stage.reads is None) == (stage.group is None), stage  # a consumer has a group, a producer none
        named = {field for arg in stage.args for _, field, _, _ in string.Formatter().parse(arg) if field}
        assert named <= set(RUN_VALUES), stage
    assert app.results in TOPIC_FIELDS
    assert app.decoder is None or callable(app.decoder)
    assert app.emulated.profile in BUILT_IN


def test_object_detections_decoder_reads_a_detections_record_as_the_results_timeline() -> None:
    """The decoder imports its stage's code when called: it must reach a real function and read a real record."""
    from aitax.pipeline.schema import DetectedObject, DetectionsMessage, encode_detections

    _, value = encode_detections(DetectionsMessage(
        run_id="r", stream_id="cam-1", frame_index=7, objects=(DetectedObject("person", 0.9, (1, 2, 3, 4)),),
        scheduled_ns=1, captured_ns=2, ingested_ns=3, detect_start_ns=4, detected_ns=5))
    result = applications.OBJECT_DETECTION.decoder(value, 0)
    assert result.key == ("r", "cam-1", 7) and result.objects == 1
    assert result.timeline[:5] == (1, 2, 3, 3, 3)  # ingestion, then no face detection: detection stands later
    assert applications.FACE_RECOGNITION.decoder is None  # identities: the read-back's own decoder


TOY = Application(
    name="toy", title="Toy", unit="frame", answered="counted", producer=Stage("ingest"),
    consumer=Stage("detect", reads="frames", group="toy-counters", args=("--keying", "{keying}")),
    results="faces", decoder=None, split=None, needs_gallery=False, emulated=Emulated("paper", 1, 2),
    paper_breakdown="nothing in the paper", paper_sweep="none", paper_broker_wait_share={})


class _Spawned:
    def __init__(self, name: str, argv: list[str]) -> None:
        self.name, self.argv, self.pid = name, argv, len(name)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> list[_Spawned]:
    monkeypatch.setitem(APPLICATIONS, "toy", TOY)
    spawned: list[_Spawned] = []
    monkeypatch.setattr(local.children, "spawn", lambda name, argv, logs, env: spawned.append(
        _Spawned(name, list(argv))) or spawned[-1])
    monkeypatch.setattr(local.children, "wait_reported", lambda *args: None)
    return spawned


def test_a_third_application_runs_its_own_stages_from_its_description(toy: list[_Spawned], tmp_path: Path) -> None:
    workload = Workload(mode="real", producers=2, consumers=3, duration_s=5, video="v.mp4", application="toy")
    load = LocalLoad(workload, Driver(keying="stream"), "run-1", "localhost:1", tmp_path, "none")
    load.start_consumers()
    load.start_producers()
    assert [child.name for child in toy] == ["detect-1", "detect-2", "detect-3", "ingest-1", "ingest-2"]
    for child in toy:  # every command line parses as the real CLI's
        parse(child.argv)
    path, consumer = parse(toy[0].argv)
    assert path == ("detect",)
    assert (consumer["group"], consumer["keying"], consumer["run_id"]) == ("toy-counters", "stream", "run-1")
    path, producer = parse(toy[-1].argv)
    assert path == ("ingest",)
    assert (producer["stream_id"], producer["video"], producer["loop"]) == ("cam-2", "v.mp4", True)
    assert load.frames_through_kafka and load.consumed_topic == "frames"
    assert load.readers() == [("frames", "detect processes", 3)]
    assert load.pids() == {"ingest": [8, 8], "detect": [8, 8, 8]}
    assert set(load.run_values) == set(RUN_VALUES)  # every value a description may name, and no other


def test_an_unknown_application_or_a_split_it_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="application 'nope': choose one of face-recognition"):
        Workload(mode="real", producers=1, consumers=1, duration_s=5, application="nope")
    with pytest.raises(ValueError, match="object-detection has two stages"):
        Workload(mode="real", producers=1, consumers=1, duration_s=5, application="object-detection", stages=3)


def test_face_recognition_splits_into_ingest_and_detect_in_three_stages() -> None:
    producer, middle, consumer = applications.FACE_RECOGNITION.stages(3)
    assert (producer.command, middle and middle.command, consumer.command) == ("ingest", "detect", "identify")
    assert applications.FACE_RECOGNITION.frames_through_kafka(3)
    assert not applications.FACE_RECOGNITION.frames_through_kafka(2)
    assert applications.OBJECT_DETECTION.frames_through_kafka(2)


def test_the_chart_reads_the_same_descriptions() -> None:
    """charts/aitax/files/applications.json is what the chart's templates branch on; the schema's workloads are
    the registry's."""
    import json

    from aitax.runs.applications import chart_view

    chart = Path(__file__).resolve().parents[2] / "charts" / "aitax"
    shipped = json.loads((chart / "files" / "applications.json").read_text())
    assert shipped == chart_view(), ("regenerate it: python -c 'import json; from aitax.runs.applications import "
                                     "chart_view; print(json.dumps(chart_view(), indent=2))' > "
                                     "charts/aitax/files/applications.json")
    schema = json.loads((chart / "values.schema.json").read_text())
    assert schema["properties"]["workload"]["enum"] == list(APPLICATIONS)
