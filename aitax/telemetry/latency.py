"""Latency, defined and summarised in one place.

End to end runs from a frame's *scheduled* time (when its stream's schedule wanted it) to the moment its face's
identity was durable on the brokers (`delivered_ns`): a producer that falls behind adds latency instead of quietly
offering less load (no coordinated omission), and what an application reading `identities` waits for is all counted.

Broker wait (the paper's: detection's end to identification's start) is split by who owns each part of it:
  produce        detection's end to the brokers' append of the face (the producer's linger, the send, the leader)
  consumer_busy  the face sat in the brokers while its consumer was still busy with earlier faces (identify's
                 capacity: a queue behind compute, not Kafka's doing)
  in_kafka       the consumer was asking and the face was not yet in its hands (replication to the in-sync replicas
                 before the high watermark passes it, the fetch)
  client_queue   the client handed the face over and the batch it joined had not started (the platform's batching)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict

from aitax.telemetry.quantiles import DEFAULT_QUANTILES, min_samples, quantile_key

NS_PER_MS = 1_000_000
TAIL_PERCENTILE = 99.0
# The stages of one face's life, as consecutive timestamps of its identity record: they tile end to end.
BREAKDOWN = (
    ("schedule_delay", "scheduled_ns", "captured_ns"),  # the paper's "Delay" (Sec. 6.3): frames starting late
    ("ingest", "captured_ns", "ingested_ns"),
    ("frame_queue", "ingested_ns", "detect_start_ns"),
    ("detect", "detect_start_ns", "detected_ns"),
    ("produce", "detected_ns", "appended_ns"),
    ("consumer_busy", "appended_ns", "requested_ns"),
    ("in_kafka", "requested_ns", "fetched_ns"),
    ("client_queue", "fetched_ns", "identify_start_ns"),
    ("identify", "identify_start_ns", "identified_ns"),
    ("deliver", "identified_ns", "delivered_ns"),  # the results' linger, send and acknowledgement
)
BROKER_WAIT = ("produce", "consumer_busy", "in_kafka", "client_queue")  # the paper's broker wait, by owner


def delivered_ns(made_ns: int, appended_ms: int) -> int:
    """When a result became durable: its record's append time (the brokers' clock counts whole milliseconds, so
    never before the result was made)."""
    return max(made_ns, appended_ms * NS_PER_MS)


def broker_wait_edges(detected_ns: int, appended_ns: int | None, requested_ns: int, fetched_ns: int) -> tuple[int, int]:
    """(appended_ns, requested_ns) of one face, ordered between detection's end and its fetch so the parts of its
    broker wait never go negative: the broker's clock counts whole milliseconds, and a face whose append time is
    unknown (a topic without LogAppendTime) counts its wait until the consumer asked as produce."""
    appended = min(max(detected_ns, requested_ns if appended_ns is None else appended_ns), fetched_ns)
    return appended, min(max(appended, requested_ns), fetched_ns)


TREND_MIN_FACES = 20  # fewer faces than this: no first-half / second-half comparison
# HdrHistogram of end-to-end latency in microseconds, 1 us to 1 hour, 3 significant digits (0.1% error).
HISTOGRAM_LOWEST_US, HISTOGRAM_HIGHEST_US, HISTOGRAM_DIGITS = 1, 3_600_000_000, 3


@dataclass(frozen=True)
class Distribution:
    count: int
    mean_ms: float
    p50_ms: float
    p99_ms: float


def distribution(values_ms: Sequence[float]) -> Distribution | None:
    """Count, mean and percentiles (linear interpolation between ranks); None for no values."""
    if len(values_ms) == 0:
        return None
    p50, p99 = np.percentile(values_ms, [50.0, TAIL_PERCENTILE])
    return Distribution(count=len(values_ms), mean_ms=math.fsum(values_ms) / len(values_ms), p50_ms=float(p50),
                        p99_ms=float(p99))


def end_to_end_ms(scheduled_ns: int, delivered_ns: int) -> float:
    return (delivered_ns - scheduled_ns) / NS_PER_MS


class Timeline(NamedTuple):
    """One result's stage edges, as its record carried them (a face's identity, `pipeline.schema.IdentityMessage`,
    or Object Detection's frame laid out the same way): what latency is computed from."""

    scheduled_ns: int
    captured_ns: int
    ingested_ns: int
    detect_start_ns: int
    detected_ns: int
    appended_ns: int
    requested_ns: int
    fetched_ns: int
    identify_start_ns: int
    identified_ns: int
    delivered_ns: int
    batch_size: int

    @classmethod
    def of(cls, result: object) -> Timeline:
        """The edges of anything that carries them under these names (an identity record)."""
        return cls(*(getattr(result, name) for name in cls._fields))


def _histogram():
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(HISTOGRAM_LOWEST_US, HISTOGRAM_HIGHEST_US, HISTOGRAM_DIGITS)


class Tail(BaseModel):
    """End-to-end quantiles from an HdrHistogram, each flagged when its sample is too small to trust."""

    model_config = ConfigDict(extra="forbid")
    count: int
    max_ms: float
    stdev_ms: float
    quantiles_ms: dict[str, float]  # "p99.9" -> ms
    too_few_samples: list[str]  # quantiles whose count is below `min_samples`
    histogram: str  # the HdrHistogram (us), compressed and base64: merged across repeats

    @classmethod
    def of(cls, histogram, quantiles: Sequence[float]) -> Tail:
        count = histogram.get_total_count()
        return cls(count=count, max_ms=histogram.get_max_value() / 1000, stdev_ms=histogram.get_stddev() / 1000,
                   quantiles_ms={quantile_key(q): histogram.get_value_at_percentile(q * 100) / 1000
                                 for q in quantiles},
                   too_few_samples=[quantile_key(q) for q in quantiles if count < min_samples(q)],
                   histogram=histogram.encode().decode("ascii"))

    @classmethod
    def merged(cls, tails: Sequence[Tail], quantiles: Sequence[float]) -> Tail | None:
        """One tail over every face of several runs (repeats): their histograms added, not their quantiles."""
        from hdrh.histogram import HdrHistogram

        if not tails:
            return None
        total = _histogram()
        for tail in tails:
            total.add(HdrHistogram.decode(tail.histogram.encode("ascii")))
        return cls.of(total, quantiles)


def tail_of(values_ms: Sequence[float], quantiles: Sequence[float] = DEFAULT_QUANTILES) -> Tail:
    histogram = _histogram()
    for value in values_ms:
        histogram.record_value(min(HISTOGRAM_HIGHEST_US, max(HISTOGRAM_LOWEST_US, round(value * 1000))))
    return Tail.of(histogram, quantiles)


class LatencySummary(BaseModel):
    """A run's end-to-end latency, where it went, and whether it grew over the run."""

    model_config = ConfigDict(extra="forbid")
    faces: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    tail: Tail  # the chosen quantiles, max and standard deviation, from an HdrHistogram
    breakdown_ms: dict[str, float]  # mean per stage of BREAKDOWN: sums to mean_ms
    broker_wait_share: float  # the paper's Sec. 5.5 figure: the BROKER_WAIT parts' share of mean_ms
    broker_wait_p50_ms: float = 0.0  # of each face's whole broker wait (detection's end to identification's start)
    broker_wait_p99_ms: float = 0.0
    # Faces by the size of the batch they were identified in (the dynamic batcher's doing): size -> faces
    batch_sizes: dict[int, int] = {}
    # Mean end to end of the faces scheduled in the first and the second half (0 below TREND_MIN_FACES).
    first_half_ms: float = 0.0
    second_half_ms: float = 0.0


def summarize(identities: Sequence[Timeline],
              quantiles: Sequence[float] = DEFAULT_QUANTILES) -> LatencySummary | None:
    if not identities:
        return None
    ordered = sorted(identities, key=lambda i: i.scheduled_ns)
    e2e = [end_to_end_ms(i.scheduled_ns, i.delivered_ns) for i in ordered]
    overall = distribution(e2e)
    breakdown = {name: float(np.mean([(getattr(i, end) - getattr(i, start)) / NS_PER_MS for i in ordered]))
                 for name, start, end in BREAKDOWN}
    waits = distribution([(i.identify_start_ns - i.detected_ns) / NS_PER_MS for i in ordered])
    half = len(e2e) // 2
    trend = (float(np.mean(e2e[:half])), float(np.mean(e2e[half:]))) if len(e2e) >= TREND_MIN_FACES else (0.0, 0.0)
    return LatencySummary(faces=overall.count, mean_ms=overall.mean_ms, p50_ms=overall.p50_ms, p99_ms=overall.p99_ms,
                          tail=tail_of(e2e, quantiles), breakdown_ms=breakdown,
                          broker_wait_share=broker_wait_ms(breakdown) / overall.mean_ms if overall.mean_ms > 0 else 0.0,
                          broker_wait_p50_ms=waits.p50_ms, broker_wait_p99_ms=waits.p99_ms,
                          first_half_ms=trend[0], second_half_ms=trend[1],
                          batch_sizes=dict(sorted(Counter(i.batch_size for i in ordered).items())))


def broker_wait_ms(breakdown_ms: dict[str, float]) -> float:
    """The paper's broker wait (detection's end to identification's start) out of a breakdown by owner (or, in a
    result written before the split, its own entry)."""
    if "broker_wait" in breakdown_ms:
        return breakdown_ms["broker_wait"]
    return math.fsum(breakdown_ms.get(part, 0.0) for part in BROKER_WAIT)


def batch_size_p50(batch_sizes: dict[int, int]) -> float | None:
    """The batch size the median face was identified in."""
    faces = sum(batch_sizes.values())
    if not faces:
        return None
    seen = 0
    for size, count in sorted(batch_sizes.items()):
        seen += count
        if seen * 2 >= faces:
            return float(size)
    return None


def dominant_wait(breakdown_ms: dict[str, float]) -> str:
    """Which owner's part of the broker wait is the largest."""
    return max(BROKER_WAIT, key=lambda part: breakdown_ms.get(part, 0.0))
