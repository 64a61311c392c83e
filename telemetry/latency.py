"""Latency, defined and summarised in one place.

End to end runs from a frame's *scheduled* time (when its stream's schedule wanted it) to its face's identity:
a producer that falls behind adds latency instead of quietly offering less load (no coordinated omission).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict

from telemetry.quantiles import DEFAULT_QUANTILES, min_samples, quantile_key

NS_PER_MS = 1_000_000
TAIL_PERCENTILE = 99.0
# The stages of one face's life, as consecutive timestamps of its identity record.
BREAKDOWN = (
    ("schedule_delay", "scheduled_ns", "captured_ns"),  # the paper's "Delay" (Sec. 6.3): frames starting late
    ("ingest", "captured_ns", "ingested_ns"),
    ("frame_queue", "ingested_ns", "detect_start_ns"),
    ("detect", "detect_start_ns", "detected_ns"),
    ("broker_wait", "detected_ns", "identify_start_ns"),
    ("identify", "identify_start_ns", "identified_ns"),
)
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


def end_to_end_ms(scheduled_ns: int, identified_ns: int) -> float:
    return (identified_ns - scheduled_ns) / NS_PER_MS


class Timestamped(Protocol):
    """What a face's identity record carries (pipeline.schema.IdentityMessage): one timestamp per stage edge."""

    scheduled_ns: int
    captured_ns: int
    ingested_ns: int
    detect_start_ns: int
    detected_ns: int
    identify_start_ns: int
    identified_ns: int


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
    broker_wait_share: float  # the paper's Sec. 5.5 figure
    # Mean end to end of the faces scheduled in the first and the second half (0 below TREND_MIN_FACES).
    first_half_ms: float = 0.0
    second_half_ms: float = 0.0


def summarize(identities: Sequence[Timestamped],
              quantiles: Sequence[float] = DEFAULT_QUANTILES) -> LatencySummary | None:
    if not identities:
        return None
    ordered = sorted(identities, key=lambda i: i.scheduled_ns)
    e2e = [end_to_end_ms(i.scheduled_ns, i.identified_ns) for i in ordered]
    overall = distribution(e2e)
    breakdown = {name: float(np.mean([(getattr(i, end) - getattr(i, start)) / NS_PER_MS for i in ordered]))
                 for name, start, end in BREAKDOWN}
    half = len(e2e) // 2
    trend = (float(np.mean(e2e[:half])), float(np.mean(e2e[half:]))) if len(e2e) >= TREND_MIN_FACES else (0.0, 0.0)
    return LatencySummary(faces=overall.count, mean_ms=overall.mean_ms, p50_ms=overall.p50_ms, p99_ms=overall.p99_ms,
                          tail=tail_of(e2e, quantiles), breakdown_ms=breakdown,
                          broker_wait_share=breakdown["broker_wait"] / overall.mean_ms if overall.mean_ms > 0 else 0.0,
                          first_half_ms=trend[0], second_half_ms=trend[1])
