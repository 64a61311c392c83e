"""Latency, defined and summarised in one place.

End to end runs from a frame's *scheduled* time (when its stream's schedule wanted it) to its face's identity:
a producer that falls behind adds latency instead of quietly offering less load (no coordinated omission).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NS_PER_MS = 1_000_000
TAIL_PERCENTILE = 99.0


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
