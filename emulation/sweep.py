"""`aitax emulate`: one emulated run per acceleration factor against the local brokers, and the verdicts.

Per factor: fresh topics (partitions = consumer instances, RF 3, min.insync 2), consumer processes started and
ready, producer processes offering `instances x fps x factor x faces/frame` for the window, a drain, then the identities
read back for latency and throughput while broker CPU/disk and machine CPU/network were sampled.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from aitax.stack import kafka
from aitax.stack.config import StackConfig
from emulation.analysis import LatencySummary, Verdict, judge, saturated_resource, summarize
from emulation.profile import Profile
from emulation.resources import Sampler
from ground import children
from ground.errors import UserError
from ground.paper import HIGHEST_STABLE_FACTOR
from ground.paths import aitax_home
from pipeline.schema import DEFAULT_KEYING, Topics

PRODUCERS_ROLE, CONSUMERS_ROLE = "the emulator's producers", "the emulator's consumers"
DRAIN_S = 15.0  # after the window: enough for a stable run's queues to empty, not for an unstable one's
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SweepSpec:
    factors: list[float]
    duration_s: float
    producers: int  # emulated ingest/detect instances (streams)
    consumers: int  # emulated identify instances
    processes: int  # OS processes per side
    profile: Profile
    profile_name: str
    kafka_client: str = "confluent-kafka"
    disk_write_capacity: float = 2.2e9  # bytes/s; this machine's sequential write measured with fio
    events: str = "none"
    # Seconds of discarded 1x load before the first factor: freshly started brokers spend their first half
    # minute JIT-compiling on the same cores, which would be charged to the first factors.
    warmup_s: float = 0.0
    keying: str = DEFAULT_KEYING  # of the `faces` records (pipeline.schema.KEYINGS)

    def __post_init__(self) -> None:
        if not self.factors or any(f <= 0 for f in self.factors):
            raise UserError(f"--factors {self.factors}: every factor must be > 0")
        if self.warmup_s and self.warmup_s < 5:
            raise UserError(f"--warmup {self.warmup_s:g}: 0 (none) or at least 5 s")
        if self.duration_s < 5:
            raise UserError(f"--duration {self.duration_s}: at least 5 s per factor")
        if self.producers < 1 or self.consumers < 1 or self.processes < 1:
            raise UserError("--producers, --consumers and --processes must be at least 1")


@dataclass
class FactorResult:
    factor: float
    stable: bool
    reasons: list[str]
    brokers: int
    drives_per_broker: int
    producers: int
    consumers: int
    offered_faces_per_s: float
    achieved_faces_per_s: float
    produced_faces: int
    identified_faces: int
    backlog_faces: int
    face_bytes_mean: float
    latency: LatencySummary | None
    first_half_ms: float
    second_half_ms: float
    broker_disk_write_bytes_per_s: float  # mean per broker (the TCO planner's input)
    broker_disk_read_bytes_per_s: float
    broker_write_bytes_per_s: dict[int, float] = field(default_factory=dict)
    broker_cpu_cores: dict[int, float] = field(default_factory=dict)
    machine_cpu_busy: float = 0.0
    loopback_bytes_per_s: float = 0.0
    # The brokers' own saturation signals over the window, and the CPU the emulator itself used.
    broker_handler_busy: dict[int, float] = field(default_factory=dict)
    broker_network_busy: dict[int, float] = field(default_factory=dict)
    under_min_isr_partitions: int = 0
    produce_p99_ms: float = 0.0
    fetch_p99_ms: float = 0.0
    emulator_cpu_cores: dict[str, float] = field(default_factory=dict)
    saturated: str = ""


def _split(total: int, parts: int) -> list[int]:
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class EmulatedLoad:
    """One emulated run's processes and topics: consumers first (and ready), then producers for the window,
    then a drain. The sweep measures it; the fault scenarios disturb it while it runs."""

    def __init__(self, spec: SweepSpec, config: StackConfig, factor: float, run_name: str, workdir: Path,
                 events: str | None = None) -> None:
        self.spec, self.config, self.factor, self.run_name = spec, config, factor, run_name
        self.topics = Topics.with_prefix(f"emu-{run_name}-")
        self.group = f"emu-{run_name}"
        self.logs = workdir / run_name
        self.logs.mkdir(parents=True, exist_ok=True)
        self.common = ["--factor", str(factor), "--profile", spec.profile_name, "--run-id", run_name,
                       "--topic-prefix", f"emu-{run_name}-", "--kafka-client", spec.kafka_client, "--bootstrap",
                       config.bootstrap_servers, "--events", events or spec.events, "--metrics-port", "-1"]
        self.consumers: list[children.Child] = []
        self.producers: list[children.Child] = []

    def start(self) -> None:
        kafka.ensure_topics(self.config, replace(self.config, faces_partitions=max(3, self.spec.consumers))
                            .topics(self.topics))
        for i, n in enumerate(_split(self.spec.consumers, self.spec.processes)):
            self.consumers.append(children.spawn(f"consumers-{i}", ["emulate-consumers", "--instances", str(n),
                                                                    "--group", self.group, *self.common], self.logs))
        children.wait_reported(self.consumers, children.READY, READY_TIMEOUT_S, "emulated consumers")
        for i, n in enumerate(_split(self.spec.producers, self.spec.processes)):
            self.producers.append(children.spawn(f"producers-{i}", [
                "emulate-producers", "--instances", str(n), "--stream-prefix", f"s{i}", "--duration",
                str(self.spec.duration_s), "--keying", self.spec.keying, *self.common], self.logs))

    def watch(self, sampler: Sampler) -> None:
        """Have `sampler` account the CPU of this load's own processes."""
        sampler.watch(PRODUCERS_ROLE, [child.pid for child in self.producers])
        sampler.watch(CONSUMERS_ROLE, [child.pid for child in self.consumers])

    def wait_producers(self, timeout_s: float) -> None:
        for child in self.producers:
            child.process.wait(timeout_s)

    def drain(self, timeout_s: float) -> int:
        """Wait for the consumers to catch up; returns the faces still not identified."""
        from pipeline.transport.admin import group_lag

        deadline = time.monotonic() + timeout_s
        backlog = group_lag(self.config.bootstrap_servers, self.group, self.topics.faces)
        while backlog > 0 and time.monotonic() < deadline:
            time.sleep(0.5)
            backlog = group_lag(self.config.bootstrap_servers, self.group, self.topics.faces)
        return backlog

    def stop(self) -> None:
        children.stop(self.consumers + self.producers, 60)

    def failures(self, ignore: set[int] = frozenset()) -> list[Path]:
        """Logs of processes that failed (killed on purpose: their pids in `ignore`)."""
        return [child.log for child in children.failed(self.consumers + self.producers, ignore)]

    def produced(self) -> tuple[int, float]:
        """Faces acknowledged and mean thumbnail bytes, from the producer processes' summaries."""
        summaries = [status for child in self.producers for status in child.statuses(children.SUMMARY)]
        faces = sum(summary["acknowledged"] for summary in summaries)
        return faces, sum(summary["bytes"] for summary in summaries) / faces if faces else 0.0

    def identities(self):
        from pipeline.evaluate import read_identities

        return read_identities(self.config.bootstrap_servers, self.run_name, topic=self.topics.identities)

    def delete_topics(self) -> None:
        delete_topics(self.config, self.topics)


def run_factor(spec: SweepSpec, config: StackConfig, factor: float, run_id: str, workdir: Path) -> FactorResult:
    load = EmulatedLoad(spec, config, factor, f"{run_id}-x{factor:g}", workdir)
    try:
        with Sampler(config) as sampler:
            load.start()
            load.watch(sampler)
            window_start, window_start_ns = time.monotonic(), time.time_ns()
            load.wait_producers(spec.duration_s + 120)
            window_end, window_end_ns = time.monotonic(), time.time_ns()
            backlog = load.drain(DRAIN_S)
            usage = sampler.usage(window_start, window_end)
    finally:
        load.stop()
    failed = load.failures()
    if failed:
        raise UserError(f"an emulated stage failed at {factor:g}x; see {failed[0]}")
    produced, face_bytes = load.produced()
    identities, _ = load.identities()
    offered = round(spec.producers * spec.profile.fps * factor * spec.profile.mean_faces_per_frame()
                    * spec.duration_s)
    in_window = [i for i in identities if window_start_ns <= i.identified_ns <= window_end_ns]
    verdict: Verdict = judge(identities, offered, produced, identified_in_window=len(in_window))
    latency = summarize(identities)
    write_per_broker = _mean(usage.broker_write_bytes_per_s)
    result = FactorResult(
        factor=factor, stable=verdict.stable, reasons=verdict.reasons, brokers=config.brokers,
        drives_per_broker=config.log_dirs_per_broker, producers=spec.producers, consumers=spec.consumers,
        offered_faces_per_s=offered / spec.duration_s,
        # Over the offered schedule's length: the window also holds the producer processes' start-up.
        achieved_faces_per_s=len(in_window) / spec.duration_s,
        produced_faces=produced, identified_faces=len(identities), backlog_faces=backlog,
        face_bytes_mean=face_bytes, latency=latency, first_half_ms=verdict.first_half_ms,
        second_half_ms=verdict.second_half_ms, broker_disk_write_bytes_per_s=write_per_broker,
        broker_disk_read_bytes_per_s=_mean(usage.broker_read_bytes_per_s),
        broker_write_bytes_per_s=usage.broker_write_bytes_per_s, broker_cpu_cores=usage.broker_cpu_cores,
        machine_cpu_busy=usage.machine_cpu_busy, loopback_bytes_per_s=usage.loopback_bytes_per_s,
        broker_handler_busy=usage.broker_handler_busy, broker_network_busy=usage.broker_network_busy,
        under_min_isr_partitions=usage.under_min_isr_partitions, produce_p99_ms=usage.produce_p99_ms,
        fetch_p99_ms=usage.fetch_p99_ms, emulator_cpu_cores=usage.role_cpu_cores)
    result.saturated = saturated_resource(usage, spec.disk_write_capacity, latency)
    load.delete_topics()
    return result


def _mean(values: dict[int, float]) -> float:
    return sum(values.values()) / len(values) if values else 0.0


def delete_topics(config: StackConfig, topics: Topics) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers, "log_level": 0})
    for future in admin.delete_topics([topics.faces, topics.identities, topics.dlq]).values():
        with contextlib.suppress(Exception):  # a topic that is already gone is fine
            future.result(30)


def run_sweep(spec: SweepSpec, config: StackConfig, progress=print) -> dict:
    run_id = time.strftime("emu-%Y%m%d-%H%M%S")
    workdir = aitax_home() / "emulation" / run_id
    workdir.mkdir(parents=True, exist_ok=True)
    results = []
    if spec.warmup_s:
        progress(f"warm-up: {spec.warmup_s:.0f} s at 1x, not measured")
        run_factor(replace(spec, duration_s=spec.warmup_s), config, 1.0, f"{run_id}-warmup", workdir)
    for factor in spec.factors:
        progress(f"{factor:g}x: {spec.producers} producers, {spec.consumers} consumers, {spec.duration_s:.0f} s")
        result = run_factor(spec, config, factor, run_id, workdir)
        results.append(result)
        progress(_one_line(result))
    document = {
        "run_id": run_id, "profile": spec.profile.name, "replication_factor": config.replication_factor,
        "brokers": config.brokers, "drives_per_broker": config.log_dirs_per_broker,
        "duration_s": spec.duration_s, "kafka_client": spec.kafka_client,
        "highest_stable_factor": highest_stable(results),
        "factors": [asdict(r) for r in results],
    }
    (workdir / "results.json").write_text(json.dumps(document, indent=2))
    return document


def highest_stable(results: list[FactorResult]) -> float | None:
    """The highest factor below the first unstable one (the paper's reading of Fig. 10 and 15)."""
    best = None
    for result in sorted(results, key=lambda r: r.factor):
        if not result.stable:
            break
        best = result.factor
    return best


def _one_line(r: FactorResult) -> str:
    latency = f"e2e mean {r.latency.mean_ms:.0f} ms p99 {r.latency.p99_ms:.0f} ms" if r.latency else "no faces"
    return (f"  {r.factor:g}x {'stable' if r.stable else 'UNSTABLE'}: {r.achieved_faces_per_s:.0f}/"
            f"{r.offered_faces_per_s:.0f} faces/s, {latency}, broker writes "
            f"{r.broker_disk_write_bytes_per_s / 1e6:.1f} MB/s each, cpu {r.machine_cpu_busy:.0%}; {r.saturated}")





def run_scaling(dimension: str, values: list[float], spec: SweepSpec, progress=print) -> dict:
    """One sweep per configuration along `dimension`; the table of highest stable factors (Fig. 15)."""
    from aitax.stack.stack import current_config, reshape_kafka, running_config

    original = running_config()
    rows = []
    try:
        for value in values:
            config, run_spec = original, spec
            if dimension == "brokers":
                config = reshape_kafka(original, int(value), original.log_dirs_per_broker, progress)
            elif dimension == "drives":
                config = reshape_kafka(original, original.brokers, int(value), progress)
            else:
                run_spec = replace(spec, profile=spec.profile.scaled_faces(value),
                                   profile_name=_write_profile(spec.profile.scaled_faces(value)))
            progress(f"== {dimension} {value:g}")
            document = run_sweep(run_spec, config, progress)
            rows.append({"dimension": dimension, "value": value, "highest_stable_factor":
                         document["highest_stable_factor"], "paper": HIGHEST_STABLE_FACTOR[dimension].get(value),
                         "results": document})
    finally:
        if dimension in ("brokers", "drives"):
            reshape_kafka(current_config() or original, original.brokers, original.log_dirs_per_broker, progress)
    return {"dimension": dimension, "rows": rows}


def _write_profile(profile: Profile) -> str:
    path = aitax_home() / "emulation" / "profiles" / f"{profile.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile.to_yaml())
    return str(path)
