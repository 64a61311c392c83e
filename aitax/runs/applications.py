"""The applications aitax runs, each described once, as data: its stages (the command each process runs, the topic it
reads and its group), the unit a run counts, where its results are read back, what the emulator replays and which
paper figures stand beside it. The local load, the run printer, the sweep table, the emulator's defaults and the
workload's validation read these descriptions; none of them names an application.

Adding one is a new `Application` in `APPLICATIONS` and the stage commands it names (docs/adding-a-workload.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aitax.common.paper import BROKER_WAIT_SHARE
from aitax.common.paper import OBJECT_DETECTION as PAPER_OD


@dataclass(frozen=True)
class Stage:
    """One kind of stage process. `args` are added to its command line; a `{name}` in them is the run's value
    (`RUN_VALUES` lists the names)."""

    command: str  # the `aitax` subcommand
    reads: str | None = None  # the `pipeline.schema.Topics` field it consumes (None: it decodes a video)
    group: str | None = None  # its consumer group on that topic
    # identify skips other runs' records and reads from the start: a group of its own per run (GROUP-RUN) keeps an
    # interrupted run's leftovers out of the next run's work
    group_per_run: bool = False
    args: tuple[str, ...] = ()


# The run values a stage's `args` may name: the workload's and the driver's settings a stage takes.
RUN_VALUES = ("gallery", "keying", "send", "max_queue_delay_ms", "results_linger_ms")
BATCHING = ("--max-queue-delay-ms", "{max_queue_delay_ms}")


@dataclass(frozen=True)
class Emulated:
    """What the emulator replays for the application: its built-in profile (emulation.profile) and the instance
    counts it needs by default."""

    profile: str
    producers: int
    consumers: int


@dataclass(frozen=True)
class Application:
    name: str  # the workload's `application`
    title: str
    unit: str  # what a run counts and times end to end: one record of the consumers' topic
    answered: str  # what a counted unit becomes once its result is durable
    producer: Stage  # one per stream
    consumer: Stage  # the workload's `consumers` of them
    results: str  # the Topics field the consumer publishes its results to, read back per run
    # decodes a results record (and its append time) for pipeline.transport.readback; None: identities
    decoder: Callable[[bytes, int], Any] | None
    # three stages (the paper's Fig. 3a): the producer and the stage split out of it, one of each per stream
    split: tuple[Stage, Stage] | None
    needs_gallery: bool
    emulated: Emulated
    # The paper's figures printed beside a run's per-unit breakdown ({ingest}, {broker_wait}, {compute} in ms) and
    # beside a sweep's highest stable factor; the paper's broker-wait share per factor (Fig. 10), where it gave one
    paper_breakdown: str | None
    paper_sweep: str
    paper_broker_wait_share: dict[int, float]

    def stages(self, count: int) -> tuple[Stage, Stage | None, Stage]:
        """(producer, the split-out middle stage or None, consumer) of a real run in `count` stages."""
        if count == 3:
            if self.split is None:
                raise ValueError(f"{self.name} has two stages: stages 3 is for applications that split one")
            return self.split[0], self.split[1], self.consumer
        return self.producer, None, self.consumer

    def frames_through_kafka(self, count: int) -> bool:
        """Whether a real run in `count` stages sends every frame through the `frames` topic."""
        producer, _, _ = self.stages(count)
        return producer.command == "ingest"


INGEST = Stage("ingest")


def _frame_result(value: bytes, appended_ms: int = 0) -> Any:
    """A `detections` record with its frame on the results' timeline (`pipeline.objects.frame_result`, imported
    when a run's results are read: describing the applications loads no model code)."""
    from aitax.pipeline.objects import frame_result

    return frame_result(value, appended_ms)

FACE_RECOGNITION = Application(
    name="face-recognition",
    title="Face Recognition",
    unit="face",
    answered="identified",
    producer=Stage("ingest-detect", args=("--keying", "{keying}", "--send", "{send}")),
    consumer=Stage("identify", reads="faces", group="identify", group_per_run=True,
                   args=("--gallery", "{gallery}", *BATCHING, "--results-linger-ms", "{results_linger_ms}")),
    results="identities",
    decoder=None,
    split=(INGEST, Stage("detect", reads="frames", group="detect", args=("--keying", "{keying}", *BATCHING))),
    needs_gallery=True,
    emulated=Emulated("paper", producers=4, consumers=8),
    paper_breakdown=None,
    paper_sweep="paper, 3 brokers x 1 NVMe: 6x",
    paper_broker_wait_share=BROKER_WAIT_SHARE,
)

OBJECT_DETECTION = Application(
    name="object-detection",
    title="Object Detection",
    unit="frame",
    answered="answered",
    producer=INGEST,
    consumer=Stage("detect-objects", reads="frames", group="detect-objects", args=BATCHING),
    results="detections",
    decoder=_frame_result,
    split=None,
    needs_gallery=False,
    # One 30 FPS stream needs 30 x 0.687 = 21 detection instances busy at any factor (at Nx the frames come N times
    # as fast and take 1/N the time); 24 leave headroom.
    emulated=Emulated("object-detection", producers=1, consumers=24),
    paper_breakdown=(f"paper's Object Detection at 1x: ingest {PAPER_OD.ingest_ms:g} ms, broker wait "
                     f"{PAPER_OD.broker_wait_ms:.0f} ms, Faster R-CNN {PAPER_OD.detect_ms:.0f} ms; "
                     f"{PAPER_OD.achieved_fps_at_1x:.0f} FPS from {PAPER_OD.producers} streams"),
    paper_sweep=(f"paper's Object Detection: latency degrades after {PAPER_OD.stable_through}x, passes 3 s at "
                 f"{PAPER_OD.over_3000_ms_at}x, grows without bound from {PAPER_OD.unbounded_from}x; "
                 f"{PAPER_OD.achieved_fps_at_1x:.0f} FPS at 1x from {PAPER_OD.producers} streams, broker wait "
                 f"{PAPER_OD.broker_wait_ms:.0f} ms"),
    paper_broker_wait_share={},
)

APPLICATIONS: dict[str, Application] = {app.name: app for app in (FACE_RECOGNITION, OBJECT_DETECTION)}


def application(name: str) -> Application:
    try:
        return APPLICATIONS[name]
    except KeyError:
        raise ValueError(f"application {name!r}: choose one of {', '.join(APPLICATIONS)}") from None


def chart_view() -> dict[str, dict[str, object]]:
    """What the Helm chart reads of each application (charts/aitax/files/applications.json, which a test keeps equal
    to this): its stages' commands, whether it splits into three, and where its results go."""
    return {app.name: {"title": app.title, "producer": app.producer.command, "consumer": app.consumer.command,
                       "splits": app.split is not None, "framesThroughKafka": app.frames_through_kafka(2),
                       "results": app.results}
            for app in APPLICATIONS.values()}

