"""A camera's health as ingestion measures it, described once: the ingest process counts it, `camera` events carry
it, Prometheus exports it and the report tabulates it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

# Where a frame's capture time came from: the stream's own clock (its RTP timestamps, anchored to the least
# delayed arrival so that network delay after it shows as lateness) or, without one, the moment it arrived.
CAPTURE_CLOCKS = ("stream", "arrival")


@dataclass(frozen=True)
class CameraHealth:
    """Cumulative since the ingest process started. Every frame received is detected, dropped, or still queued."""

    received: int = 0  # frames the decoder gave back
    decoded: int = 0  # of those, frames that converted to a picture (the rest are counted in `undecodable`)
    undecodable: int = 0
    dropped: int = 0  # taken off the queue unprocessed because detection fell behind (newest kept)
    detected: int = 0  # frames detection finished
    connects: int = 0  # connections that delivered a frame
    reconnects: int = 0  # of those, after an outage
    failed_connects: int = 0
    longest_gap_s: float = 0.0  # longest time between two frames (an outage's, or a stall's)
    gaps_s: float = 0.0  # time lost to outages altogether
    measured_fps: float = 0.0  # frames per second over the last 50, by the stream's clock (else by arrival)
    declared_fps: float = 0.0  # what the camera or its settings say (0: unknown)
    connected: bool = False
    stream_clock: bool = False  # True: capture times from the stream's clock; False: arrival (CAPTURE_CLOCKS)

    @property
    def capture_clock(self) -> str:
        return CAPTURE_CLOCKS[0] if self.stream_clock else CAPTURE_CLOCKS[1]

    @property
    def slower_than_declared(self) -> bool:
        """The camera delivers under 90% of the rate it declares (a tenth: more than network jitter)."""
        return bool(self.declared_fps) and self.connected and 0 < self.measured_fps < 0.9 * self.declared_fps

    def to_document(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> CameraHealth:
        return cls(**{f.name: document[f.name] for f in fields(cls) if f.name in document})


COUNTERS = ("received", "decoded", "undecodable", "dropped", "detected", "connects", "reconnects", "failed_connects")


def field_mapping() -> dict[str, Any]:
    """The Elasticsearch mapping of an event's `camera` object."""
    kinds = {int: "long", float: "double", bool: "boolean"}
    return {"dynamic": "strict",
            "properties": {f.name: {"type": kinds[type(f.default)]} for f in fields(CameraHealth)}}
