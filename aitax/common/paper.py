"""The AI-tax paper's numbers, typed once: everything that prints a measurement beside the paper's reads them here
(../shared/notes/paper-numbers.md lists their sources)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperNumbers:
    """What the AI-tax report prints beside a run (and carries in its JSON)."""

    mean_ms: dict[str, float]  # Fig. 6, Sec. 4.2; "e2e" is end to end
    p99_ms: dict[str, float]  # standalone tails, Sec. 4.2
    ai_share: dict[str, float]  # Fig. 8, Sec. 4.3; "application" is the whole application
    amdahl_asymptote: dict[str, float]  # Fig. 9, Sec. 5.1: from the non-AI shares 57.6% and 12.4% (AI rounded above)
    amdahl_points: dict[str, dict[str, float]]  # Sec. 5.1: process -> {AI speed-up: overall speed-up}


PAPER = PaperNumbers(
    mean_ms={"ingest": 18.8, "detect": 74.8, "broker_wait": 126.1, "identify": 131.5, "e2e": 351.0},
    p99_ms={"ingest": 27.0, "detect": 1840.0, "broker_wait": 116.0, "identify": 380.0, "e2e": 2210.0},
    ai_share={"detect": 0.42, "identify": 0.88, "application": 0.552},
    amdahl_asymptote={"detect": 1.74, "identify": 8.0},
    amdahl_points={"detect": {"8": 1.59, "16": 1.66}, "identify": {"16": 5.6, "32": 6.6}},
)

@dataclass(frozen=True)
class ObjectDetectionNumbers:
    """The paper's second application (Sec. 6, Fig. 12-14): every frame goes through Kafka to an R-CNN."""

    ingest_ms: float  # rate-limited to `fps`
    detect_ms: float
    broker_wait_ms: float
    fps: float  # per ingestion instance; at Nx a producer sends N frames per 1/fps tick (Sec. 6.3)
    producers: int
    achieved_fps_at_1x: float  # Fig. 14, all producers together
    stable_through: int  # Fig. 13: latency degrades after this factor ...
    over_3000_ms_at: int  # ... passes 3 s here ...
    unbounded_from: int  # ... and grows without bound from here


OBJECT_DETECTION = ObjectDetectionNumbers(ingest_ms=4.5, detect_ms=687.0, broker_wait_ms=629.0, fps=30.0, producers=21,
                                          achieved_fps_at_1x=630.0, stable_through=4, over_3000_ms_at=12,
                                          unbounded_from=16)
# Fig. 5, Sec. 3.5: compute latency on 2 cores relative to 1 (-16% ingest/detect, -36% identify; more was slower)
CORE_SCALING_TWO_CORES = {"ingest-detect": 0.84, "identify": 0.64}
# Fig. 12, Sec. 6.1: Object Detection's detection containers scale "near linear" with cores (14 a container). The
# text gives no values: linear (1/n) is what it states, drawn as such.
CORE_SCALING_NEAR_LINEAR = ("detect-objects",)
THUMBNAIL_BYTES = 37_300  # Sec. 4.2: one face thumbnail on the `faces` topic
STREAM_FPS = 10.0  # Sec. 3: frames per second per camera stream
VIDEO_FACES_PER_FRAME = 0.64  # Sec. 4.1: the paper's video, 0-5 faces per frame
BROKER_WAIT_SHARE = {1: 0.646, 2: 0.664, 4: 0.680, 6: 0.791}  # Sec. 5.5: of end-to-end latency, per AI speed-up
# Fig. 11b, Sec. 5.4: broker storage writes as a share of the drive's capacity (1.1 GB/s), per AI speed-up; the
# network never passed 6% of 100 Gbit/s (broker reads 6 Gbit/s at 8x)
STORAGE_WRITE_SHARE = {1: 0.10, 8: 0.67}
NETWORK_SHARE_AT_8X = 0.06
# Fig. 15: the highest stable AI speed-up per configuration (3 brokers x 1 drive and full-size faces unless varied).
HIGHEST_STABLE_FACTOR = {"brokers": {3: 6, 4: 8, 6: 16, 8: 32}, "drives": {1: 6, 2: 12, 3: 24, 4: 32},
                         "face-size": {1.0: 6, 0.5: None, 0.25: None, 0.125: None}}
