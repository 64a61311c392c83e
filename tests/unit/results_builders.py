"""Results files as `aitax emulate` writes them, built from the few figures a test cares about."""

from __future__ import annotations

from pathlib import Path

from aitax.pipeline.schema import IdentityMessage
from aitax.runs.results import (
    Condition,
    Driver,
    Resources,
    RunResult,
    SweepResult,
    Verdict,
    Workload,
    write_results,
)


def emulated_run(factor: float, stable: bool, writes: float, brokers: int = 3, producers: int = 840,
                 face_bytes_mean: float = 37_300) -> RunResult:
    """A run whose brokers each wrote `writes` bytes/s, judged `stable` or not."""
    return RunResult(
        run_id=f"emu-x{factor:g}", brokers=brokers, drives_per_broker=1,
        workload=Workload(mode="emulated", producers=producers, consumers=2 * producers, duration_s=20,
                          factor=factor, profile="paper"),
        driver=Driver(), load_started_ns=0, load_ended_ns=20 * 10**9, window_start_ns=0, window_end_ns=20 * 10**9,
        offered_faces_per_s=1.0,
        achieved_faces_per_s=1.0, produced_faces=20, identified_faces=20, backlog_faces=0,
        face_bytes_mean=face_bytes_mean, latency=None,
        verdict=Verdict(conditions=[Condition(name="throughput", held=stable, measured="-", required="-")]),
        resources=Resources(broker_disk_write_bytes_per_s=writes, broker_disk_read_bytes_per_s=0.0))


def write_sweep(folder: Path, runs: list[RunResult], brokers: int = 3, replication_factor: int = 3) -> Path:
    sweep = SweepResult(run_id="emu-test", profile="paper", replication_factor=replication_factor, brokers=brokers,
                        drives_per_broker=1, duration_s=20, kafka_client="confluent-kafka", runs=runs)
    return write_results(sweep, folder / "results.json")


def identity(scheduled_ms: float, latency_ms: float) -> IdentityMessage:
    """An identity scheduled at `scheduled_ms` whose 10 steps share `latency_ms` evenly."""
    start = int(scheduled_ms * 1e6)
    step = int(latency_ms * 1e6 / 10)
    marks = [start + i * step for i in range(11)]
    return IdentityMessage(run_id="r", stream_id="s", frame_index=0, face_index=0, identity="emulated", score=1.0,
                           box=(0, 0, 1, 1), scheduled_ns=marks[0], captured_ns=marks[1], ingested_ns=marks[2],
                           detect_start_ns=marks[3], detected_ns=marks[4], appended_ns=marks[5],
                           requested_ns=marks[6], fetched_ns=marks[7], identify_start_ns=marks[8],
                           identified_ns=marks[9], delivered_ns=marks[10])
