"""Judging one emulated factor: latency and its breakdown, a stability verdict, and what saturated first.

End-to-end latency is `telemetry.latency`'s: from a frame's scheduled time (no coordinated omission).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from emulation.resources import Usage
from pipeline.schema import IdentityMessage
from telemetry.latency import NS_PER_MS, distribution, end_to_end_ms

# The stages of one face's life, as consecutive timestamps of its identity record.
BREAKDOWN = (
    ("schedule_delay", "scheduled_ns", "captured_ns"),  # the paper's "Delay" (Sec. 6.3): frames starting late
    ("ingest", "captured_ns", "ingested_ns"),
    ("frame_queue", "ingested_ns", "detect_start_ns"),
    ("detect", "detect_start_ns", "detected_ns"),
    ("broker_wait", "detected_ns", "identify_start_ns"),
    ("identify", "identify_start_ns", "identified_ns"),
)
THROUGHPUT_FLOOR = 0.9  # achieved below 90% of offered: faces pile up somewhere
LATENCY_GROWTH = 1.5  # second half of the window slower than 1.5x the first: queues are growing
LATENCY_GROWTH_MIN_MS = 100.0  # ... by at least this much (noise on a small machine)
SATURATION = 0.85  # a resource busier than this is saturated (the paper saw storage give out near 67%)


@dataclass
class LatencySummary:
    faces: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    breakdown_ms: dict[str, float]  # mean per stage: sums to mean_ms
    broker_wait_share: float  # the paper's Sec. 5.5 figure


def summarize(identities: list[IdentityMessage]) -> LatencySummary | None:
    if not identities:
        return None
    e2e = distribution([end_to_end_ms(i.scheduled_ns, i.identified_ns) for i in identities])
    breakdown = {name: float(np.mean([(getattr(i, end) - getattr(i, start)) / NS_PER_MS for i in identities]))
                 for name, start, end in BREAKDOWN}
    return LatencySummary(e2e.count, e2e.mean_ms, e2e.p50_ms, e2e.p99_ms, breakdown,
                          breakdown["broker_wait"] / e2e.mean_ms if e2e.mean_ms > 0 else 0.0)


@dataclass
class Verdict:
    stable: bool
    reasons: list[str] = field(default_factory=list)
    achieved_ratio: float = 0.0
    first_half_ms: float = 0.0
    second_half_ms: float = 0.0


def judge(identities: list[IdentityMessage], offered_faces: int, produced_faces: int,
          identified_in_window: int | None = None) -> Verdict:
    """Unstable when throughput during the window falls short of the offered load, or latency keeps growing
    over it (queueing theory's "infinite latency": faces enter faster than they leave)."""
    verdict = Verdict(True)
    identified = len(identities) if identified_in_window is None else identified_in_window
    verdict.achieved_ratio = identified / offered_faces if offered_faces else 0.0
    if verdict.achieved_ratio < THROUGHPUT_FLOOR:
        verdict.reasons.append(f"identified {identified} of {offered_faces} offered faces during the window "
                               f"({verdict.achieved_ratio:.0%}; produced {produced_faces})")
    ordered = sorted(identities, key=lambda i: i.scheduled_ns)
    if len(ordered) >= 20:
        half = len(ordered) // 2
        first = np.mean([end_to_end_ms(i.scheduled_ns, i.identified_ns) for i in ordered[:half]])
        second = np.mean([end_to_end_ms(i.scheduled_ns, i.identified_ns) for i in ordered[half:]])
        verdict.first_half_ms, verdict.second_half_ms = float(first), float(second)
        if second > first * LATENCY_GROWTH and second - first > LATENCY_GROWTH_MIN_MS:
            verdict.reasons.append(f"latency growing: {first:.0f} ms -> {second:.0f} ms over the window")
    verdict.stable = not verdict.reasons
    return verdict


def saturated_resource(usage: Usage, disk_write_capacity: float, latency: LatencySummary | None) -> str:
    """Which resource ran out first, from the brokers' own meters, utilisation, and where faces waited.

    A saturated machine CPU is attributed to whoever burnt the most of it: the brokers, or the emulator's own
    producers or consumers (then the verdict is about the emulator, not about Kafka)."""
    writes = usage.broker_write_bytes_per_s
    handlers = max(usage.broker_handler_busy.values(), default=0.0)
    network = max(usage.broker_network_busy.values(), default=0.0)
    utilisation = {
        "the brokers' request handlers": handlers,
        "the brokers' network threads": network,
        "broker storage writes": (sum(writes.values()) / len(writes) if writes else 0.0) / disk_write_capacity,
        "cpu (machine)": usage.machine_cpu_busy,
    }
    name, busiest = max(utilisation.items(), key=lambda item: item[1])
    under_min_isr = (f", {usage.under_min_isr_partitions} partition(s) under min ISR"
                     if usage.under_min_isr_partitions else "")
    signals = (f"[broker handlers {handlers:.0%} busy, network {network:.0%}, produce p99 {usage.produce_p99_ms:.0f} "
               f"ms, fetch p99 {usage.fetch_p99_ms:.0f} ms{under_min_isr}]")
    if busiest >= SATURATION:
        verdict = f"{name} at {busiest:.0%}"
        if name == "cpu (machine)":
            verdict += ", " + cpu_owner(usage)
        return f"{verdict} {signals}"
    if latency is not None:
        stage = max(latency.breakdown_ms, key=lambda s: latency.breakdown_ms[s])
        return f"none above {SATURATION:.0%} (busiest: {name} {busiest:.0%}); faces waited most in {stage} {signals}"
    return f"none above {SATURATION:.0%} (busiest: {name} {busiest:.0%}) {signals}"


def cpu_owner(usage: Usage) -> str:
    """'mostly the brokers (1.10 cores; ...)': who used the CPU, in cores."""
    cores = {"the brokers": sum(usage.broker_cpu_cores.values()), **usage.role_cpu_cores}
    owner = max(cores, key=lambda role: cores[role])
    others = "; ".join(f"{role} {used:.2f}" for role, used in cores.items() if role != owner)
    return f"mostly {owner} ({cores[owner]:.2f} cores{'; ' + others if others else ''})"
