"""Run a spec's phases on a backend, collect each phase's results from Elasticsearch, restore at the end."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from aitax.common.errors import UserError
from aitax.common.paper import HIGHEST_STABLE_FACTOR
from aitax.experiment.results import check_elasticsearch, stage_summaries
from aitax.experiment.spec import KAFKA, MIN_KAFKA_REPLICAS, ExperimentSpec
from aitax.runs.results import (
    BoundSearchResult,
    ExperimentResult,
    FactorRuns,
    PhaseResult,
    RunResult,
    ScalingResult,
    ScalingRow,
    SweepResult,
    format_spread,
    write_results,
)

# Events reach Elasticsearch through a sink that flushes every second: wait a little before querying.
EVENTS_SETTLE_S = 3.0


class Backend(Protocol):
    def prepare(self) -> None: ...

    def run_phase(self, index: int, run_id: str, factor: float | None = None) -> tuple[dict[str, int], RunResult]:
        """Run one phase through the load engine (at `factor`: a search's probe): the replicas that ran, and its
        `RunResult`."""

    def restore(self) -> None: ...


def run_experiment(spec: ExperimentSpec, backend: Backend, elasticsearch_url: str | None, out_dir: Path,
                   log: Callable[[str], None] = print, repeats: int = 1) -> tuple[list[PhaseResult], Path]:
    """Every check happens in `prepare` (and the Elasticsearch check) before the first phase changes anything.
    With `repeats`, the whole sequence of phases runs that many times (a drift of the machine then spreads over
    every phase) and each phase ends with its median and spread. A phase with a latency bound runs once per
    probe of its search; the file holds each probe, and the search's answer."""
    if repeats < 1:
        raise UserError(f"--repeat {repeats}: at least 1")
    backend.prepare()
    if elasticsearch_url:
        check_elasticsearch(elasticsearch_url)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    record = _Record(spec, backend, elasticsearch_url, out_dir / f"{spec.name}-{stamp}.json", log)
    try:
        for repeat, (index, phase) in itertools.product(range(1, repeats + 1), enumerate(spec.phases)):
            run_id = f"{spec.name}-{phase.name}-{stamp}" + (f"-r{repeat}" if repeats > 1 else "")
            wanted = ", ".join(f"{stage}={count}" for stage, count in phase.replicas.items())
            load = (phase.search.describe() if phase.search else f"factor {phase.factor:g}") + (
                f", {phase.in_flight} in flight" if phase.in_flight else "")
            log(f"phase {index + 1}/{len(spec.phases)} {phase.name}"
                f"{f' (repeat {repeat}/{repeats})' if repeats > 1 else ''}: {wanted}, {load}, "
                f"{phase.duration_s:g} s, run id {run_id}")
            if phase.search is None:
                record.run(index, repeat, run_id)
            else:
                record.searches.append(_search(record, index, repeat, run_id))
                record.write()
    finally:
        backend.restore()
    results = record.results
    if repeats > 1:
        for line in repeat_summary(spec, results):
            log(line)
    scaling = by_brokers(spec, results)
    if scaling is not None:
        for line in ["the phases by broker count (the paper's Fig. 15a):", *scaling.table()]:
            log(line)
    return results, record.out_file


@dataclass
class _Record:
    """The phases run so far, written after each: an interrupted experiment keeps what it finished."""

    spec: ExperimentSpec
    backend: Backend
    elasticsearch_url: str | None
    out_file: Path
    log: Callable[[str], None]
    results: list[PhaseResult] = field(default_factory=list)
    searches: list[BoundSearchResult] = field(default_factory=list)

    def run(self, index: int, repeat: int, run_id: str, factor: float | None = None) -> PhaseResult:
        """Phase `index` (at `factor`: a search's probe) through the backend, its events' summaries collected."""
        started = time.time()
        replicas, run = self.backend.run_phase(index, run_id, factor)
        result = PhaseResult(phase=self.spec.phases[index].name, run_id=run_id, started_at=started,
                             ended_at=time.time(), factor=run.workload.factor, replicas=replicas, repeat=repeat,
                             run=run.model_copy(update={"repeat": repeat}))
        if self.elasticsearch_url:
            time.sleep(EVENTS_SETTLE_S)
            try:
                result.stages = stage_summaries(self.elasticsearch_url, run_id)
            except UserError as error:  # the phase ran: keep going, and say why its results are missing
                result.note = f"results not collected: {error}"
        else:
            result.note = "no Elasticsearch given: events not collected"
        self.results.append(result)
        self.write()
        self.log(f"  done: {_summary(result)}")
        return result

    def write(self) -> None:
        write_results(ExperimentResult(experiment=self.spec.name, mode=self.spec.mode, source=self.spec.source,
                                       phases=self.results, searches=self.searches), self.out_file)


def _search(record: _Record, index: int, repeat: int, run_id: str) -> BoundSearchResult:
    """A phase's latency-bound search: each probe a run of the phase at one factor, judged by its verdict (the
    bound is one of its conditions)."""
    from aitax.emulation.sweep import highest_holding

    phase = record.spec.phases[index]
    search = phase.search
    probes: list[PhaseResult] = []

    def holds(factor: float) -> bool:
        record.log(f"  probe {factor:.3g}x")
        probes.append(record.run(index, repeat, f"{run_id}-p{len(probes) + 1}", factor))
        return probes[-1].run.stable

    highest = highest_holding(holds, search.lowest, search.highest, search.resolution)
    at_highest = next((p.run for p in probes if p.run.stable and p.factor == highest), None)
    result = BoundSearchResult(phase=phase.name, repeat=repeat, quantile=search.quantile, within_ms=search.within_ms,
                               factors=(search.lowest, search.highest), probes=[p.factor for p in probes],
                               highest_factor=highest,
                               faces_per_s=at_highest.achieved_faces_per_s if at_highest else None)
    record.log(f"  {result.line()}")
    return result


def repeat_summary(spec: ExperimentSpec, results: list[PhaseResult]) -> list[str]:
    """Per phase over its repeats: how many held, and the median (min-max) of throughput and p99."""
    lines = []
    for phase in spec.phases:
        runs = [r.run for r in results if r.phase == phase.name]
        if not runs or phase.search is not None:  # probes at many factors: the search says what they found
            continue
        group = FactorRuns(phase.factor, runs[0].workload.in_flight, runs)
        rate = group.spread(lambda run: run.achieved_faces_per_s)
        p99 = group.spread(lambda run: run.latency.p99_ms if run.latency else None)
        lines.append(f"{phase.name}: held {group.stable_repeats}/{len(runs)}, {format_spread(rate, 1)} faces/s, "
                     f"p99 {format_spread(p99)} ms (median (min-max) over repeats)")
    return lines


def by_brokers(spec: ExperimentSpec, results: list[PhaseResult]) -> ScalingResult | None:
    """Phases at two or more broker counts, read as the paper's Fig. 15a: per count, its phases are one sweep over
    their factors, read by the sweep's own rules (the highest factor whose latency did not run away, every factor
    below it held too; and the highest also below the knee)."""
    counts = sorted({result.replicas[KAFKA] for result in results if KAFKA in result.replicas})
    if len(counts) < 2:
        return None
    rows = []
    for brokers in counts:
        runs = sorted((r.run for r in results if r.replicas.get(KAFKA) == brokers), key=lambda run: run.workload.factor)
        sweep = SweepResult(run_id=f"{spec.name}-{brokers}-brokers", profile=spec.profile,
                            replication_factor=MIN_KAFKA_REPLICAS,
                            brokers=brokers, drives_per_broker=1, duration_s=runs[0].workload.duration_s,
                            kafka_client=runs[0].driver.kafka_client, repeats=max(run.repeat for run in runs),
                            runs=runs)
        rows.append(ScalingRow(value=brokers, paper=HIGHEST_STABLE_FACTOR["brokers"].get(brokers), sweep=sweep))
    return ScalingResult(dimension="brokers", rows=rows)


def _summary(result: PhaseResult) -> str:
    ready = ", ".join(f"{stage} {count}" for stage, count in result.replicas.items())
    stages = "; ".join(f"{stage}: {s.events} events, compute p50 {s.compute_ms['p50']} ms"
                       for stage, s in result.stages.items())
    verdict = f"; {'stable' if result.run.stable else 'UNSTABLE'}"
    return (f"replicas {ready}{verdict}"
            + (f"; {stages}" if stages else f" ({result.note})" if result.note else ""))
