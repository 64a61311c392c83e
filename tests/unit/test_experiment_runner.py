"""The experiment runner's repeats: every phase again per pass, each run marked with its repeat and summarised."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aitax.common.errors import UserError
from aitax.experiment.runner import run_experiment
from aitax.experiment.spec import parse_spec
from aitax.runs.results import ExperimentResult, read_results
from tests.unit.results_builders import emulated_run

SPEC = """
name: twice
mode: emulated
profile: paper
phases:
  - name: native
    duration: 10s
    replicas: {emulate-producers: 1, emulate-consumers: 1}
  - name: fast
    duration: 10s
    factor: 4
"""


class FakeBackend:
    """Phases that hold at 1x and break at 4x in its second pass."""

    def __init__(self) -> None:
        self.ran: list[tuple[int, str]] = []

    def prepare(self) -> None: ...

    def run_phase(self, index: int, run_id: str, factor: float | None = None):
        self.ran.append((index, run_id))
        factor = (1.0, 4.0)[index]
        stable = not (factor == 4.0 and len(self.ran) > 2)
        run = emulated_run(factor, stable, writes=1e6).model_copy(update={
            "run_id": run_id, "achieved_faces_per_s": 10.0 * factor + len(self.ran)})
        return {"emulate-consumers": 1, "emulate-producers": 1}, run

    def restore(self) -> None: ...


def test_repeats_run_every_phase_again_and_end_with_each_phases_spread(tmp_path: Path) -> None:
    backend, lines = FakeBackend(), []
    spec = parse_spec(yaml.safe_load(SPEC), "spec.yaml")
    results, out_file = run_experiment(spec, backend, None, tmp_path, lines.append, repeats=2)
    assert [index for index, _ in backend.ran] == [0, 1, 0, 1]
    assert [r.run_id.rsplit("-", 1)[-1] for r in results] == ["r1", "r1", "r2", "r2"]
    assert [r.repeat for r in results] == [r.run.repeat for r in results] == [1, 1, 2, 2]
    assert lines[-2:] == ["native: held 2/2, 12.0 (11.0-13.0) faces/s, p99 - ms (median (min-max) over repeats)",
                          "fast: held 1/2, 43.0 (42.0-44.0) faces/s, p99 - ms (median (min-max) over repeats)"]
    written = read_results(out_file, ExperimentResult)  # versioned, and every phase's verdict named
    assert [phase.run_id for phase in written.phases] == [r.run_id for r in results]
    assert [phase.run.verdict.held for phase in written.phases] == [True, True, True, False]
    assert written.experiment == spec.name and written.schema_version == 1
    with pytest.raises(UserError, match="--repeat 0: at least 1"):
        run_experiment(spec, backend, None, tmp_path, lines.append, repeats=0)


BROKERS_SPEC = """
name: brokers
mode: emulated
profile: paper
phases:
  - {name: b3-1x, duration: 10s, factor: 1, replicas: {kafka: 3, emulate-producers: 1, emulate-consumers: 1}}
  - {name: b3-2x, duration: 10s, factor: 2}
  - {name: b3-4x, duration: 10s, factor: 4}
  - {name: b5-1x, duration: 10s, factor: 1, replicas: {kafka: 5}}
  - {name: b5-2x, duration: 10s, factor: 2}
  - {name: b5-4x, duration: 10s, factor: 4}
"""


class BrokerBackend:
    """3 brokers hold up to 2x, 5 up to 4x."""

    def __init__(self, spec) -> None:
        self.spec = spec

    def prepare(self) -> None: ...

    def run_phase(self, index: int, run_id: str, factor: float | None = None):
        phase = self.spec.phases[index]
        brokers = phase.replicas["kafka"]
        stable = phase.factor <= (2 if brokers == 3 else 4)
        return {"kafka": brokers, **{s: 1 for s in ("emulate-consumers", "emulate-producers")}}, \
            emulated_run(phase.factor, stable, writes=1e6, brokers=brokers).model_copy(update={"run_id": run_id})

    def restore(self) -> None: ...


def test_phases_at_several_broker_counts_end_with_the_highest_stable_factor_of_each(tmp_path: Path) -> None:
    from aitax.experiment.runner import by_brokers

    spec = parse_spec(yaml.safe_load(BROKERS_SPEC), "brokers.yaml")
    lines: list[str] = []
    results, _ = run_experiment(spec, BrokerBackend(spec), None, tmp_path, lines.append)
    scaling = by_brokers(spec, results)
    assert [(row.value, row.sweep.highest_stable_factor) for row in scaling.rows] == [(3, 2), (5, 4)]
    assert [[run.workload.factor for run in row.sweep.runs] for row in scaling.rows] == [[1, 2, 4], [1, 2, 4]]
    assert lines[-3:] == scaling.table() and lines[-2].split() == ["brokers", "3", "2x", "2x", "6x"]
    assert by_brokers(spec, results[:3]) is None  # one broker count: nothing to compare


SEARCH_SPEC = """
name: bound
mode: emulated
profile: paper
phases:
  - name: closed
    duration: 10s
    factor: 2
    in_flight: 4
    replicas: {emulate-producers: 2, emulate-consumers: 3}
    instances: {producers: 5}
  - name: bound
    duration: 10s
    latency_bound: {within: 250ms, quantile: 0.9, factors: [1, 16], resolution: 1.5}
"""


class BoundBackend:
    """Runs build their workload as both backends do (`Phase.emulated_workload`); a run holds at factors up to
    `knee`, as a latency bound would be broken above it."""

    def __init__(self, spec, knee: float) -> None:
        self.spec, self.knee = spec, knee
        self.workloads = []

    def prepare(self) -> None: ...

    def run_phase(self, index: int, run_id: str, factor: float | None = None):
        phase = self.spec.phases[index]
        workload, offered = phase.emulated_workload(
            self.spec.profile, {"producers": 2, "consumers": 3}, phase.instances, 10.0, factor)
        self.workloads.append((workload, offered))
        run = emulated_run(workload.factor, workload.factor <= self.knee, writes=1e6).model_copy(update={
            "run_id": run_id, "workload": workload, "achieved_faces_per_s": 100.0 * workload.factor})
        return {"emulate-consumers": 3, "emulate-producers": 2}, run

    def restore(self) -> None: ...


@pytest.mark.parametrize(("knee", "probes", "highest"), [
    (5.0, [1, 16, 4, 8, 5.66], 4),  # bisected on a log scale until the bracket is under 1.5
    (20.0, [1, 16], 16),  # the highest holds: no more probes
    (0.5, [1], None),  # the lowest breaks already
])
def test_a_latency_bound_phase_searches_its_factors_and_a_closed_loop_offers_no_rate(
        tmp_path: Path, knee: float, probes: list[float], highest: float | None) -> None:
    spec = parse_spec(yaml.safe_load(SEARCH_SPEC), "bound.yaml")
    backend, lines = BoundBackend(spec, knee), []
    results, out_file = run_experiment(spec, backend, None, tmp_path, lines.append)
    (closed, closed_offered), *search = backend.workloads
    # The closed loop: its frames in flight on the workload, no offered rate, no bound.
    assert (closed.in_flight, closed.factor, closed.producers, closed.latency_bound_ms) == (4, 2.0, 10, None)
    assert closed_offered is None
    # Each probe: the bound and its quantile on the workload, its factor, and a window long enough for p90.
    assert [round(w.factor, 2) for w, _ in search] == probes
    for workload, offered in search:
        assert (workload.latency_bound_ms, workload.latency_bound_quantile, workload.in_flight) == (250, 0.9, None)
        assert 0.9 in workload.quantiles and offered == pytest.approx(10.0 * 10 * workload.factor)  # 2 pods of 5
        assert workload.duration_s >= max(10.0, 100 / offered)  # 10 / (1 - 0.9) faces in the window
    assert [r.phase for r in results] == ["closed", *["bound"] * len(probes)]
    assert [r.run_id.rsplit("-", 1)[-1] for r in results[1:]] == [f"p{n}" for n in range(1, len(probes) + 1)]
    written = read_results(out_file, ExperimentResult)
    (found,) = written.searches
    assert (found.phase, found.factors, found.within_ms, found.quantile) == ("bound", (1.0, 16.0), 250, 0.9)
    assert found.highest_factor == (None if highest is None else pytest.approx(highest))
    assert found.faces_per_s == (None if highest is None else pytest.approx(100.0 * highest))
    assert lines[-1] == f"  {found.line()}"
