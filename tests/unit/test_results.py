"""The one results model: latency summaries, verdicts that list each condition, and results files read back."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from aitax.common.errors import UserError
from aitax.pipeline.schema import IdentityMessage
from aitax.runs.results import (
    Driver,
    Resources,
    RunResult,
    SweepResult,
    Workload,
    judge,
    read_results,
    write_results,
)
from aitax.telemetry.latency import Tail, summarize, tail_of
from aitax.telemetry.quantiles import min_samples, parse_duration_ms, parse_quantiles, quantile_key
from tests.unit.results_builders import identity as _identity


def _emulated_verdict(identities: list[IdentityMessage], offered: int):
    return judge(summarize(identities), offered_faces=offered, identified_in_window=len(identities),
                 produced_faces=offered, identified_faces=len(identities), backlog_faces=0, drained=False)


def test_steady_latency_at_full_throughput_holds_every_condition() -> None:
    identities = [_identity(i * 100, 300) for i in range(100)]
    verdict = _emulated_verdict(identities, 100)
    assert verdict.held and verdict.reasons == []
    assert [c.name for c in verdict.conditions] == ["throughput", "latency bounded", "stage processes ran"]
    summary = summarize(identities)
    assert summary.mean_ms == pytest.approx(300, abs=0.01)
    assert sum(summary.breakdown_ms.values()) == pytest.approx(summary.mean_ms, abs=0.01)
    assert summary.broker_wait_share == pytest.approx(4 / 10, abs=0.001)  # 4 of 10 steps


def test_growing_latency_fails_its_condition() -> None:
    verdict = _emulated_verdict([_identity(i * 100, 200 + 20 * i) for i in range(100)], 100)
    assert not verdict.held
    (failed,) = [c for c in verdict.conditions if not c.held]
    assert failed.name == "latency bounded" and "-> " in failed.measured
    assert verdict.reasons[0].startswith("latency bounded: mean end to end")


def test_missing_throughput_fails_its_condition() -> None:
    verdict = _emulated_verdict([_identity(i * 100, 300) for i in range(50)], 100)
    assert not verdict.held and "50 of 100" in verdict.reasons[0]


def test_a_real_run_is_held_to_every_face_identified_and_a_drained_backlog() -> None:
    identities = [_identity(i * 100, 300) for i in range(30)]
    held = judge(summarize(identities), offered_faces=None, identified_in_window=30, produced_faces=30,
                 identified_faces=30, backlog_faces=0, drained=True)
    assert held.held and [c.name for c in held.conditions] == [
        "every acknowledged face identified", "latency bounded", "backlog drained", "stage processes ran"]
    short = judge(summarize(identities), offered_faces=None, identified_in_window=30, produced_faces=32,
                  identified_faces=30, backlog_faces=2, drained=True)
    assert [c.name for c in short.conditions if not c.held] == ["every acknowledged face identified",
                                                                 "backlog drained"]


def test_quantiles_match_exact_values_within_the_histograms_precision() -> None:
    values = [float(v) for v in range(1, 10_001)]  # 1..10,000 ms: the nearest-rank q-quantile is 10,000 q
    tail = tail_of(values, (0.5, 0.9, 0.99, 0.999))
    for key, exact in (("p50", 5_000), ("p90", 9_000), ("p99", 9_900), ("p99.9", 9_990)):
        assert tail.quantiles_ms[key] == pytest.approx(exact, rel=1e-3), key  # 3 significant digits
    assert tail.count == 10_000 and tail.too_few_samples == []
    assert tail.max_ms == pytest.approx(10_000, rel=1e-3)
    assert tail.stdev_ms == pytest.approx(statistics.pstdev(values), rel=1e-3)


def test_a_quantile_is_flagged_below_ten_samples_beyond_it() -> None:
    assert [min_samples(q) for q in (0.5, 0.9, 0.99, 0.999)] == [20, 100, 1000, 10_000]
    tail = tail_of([100.0] * 999, (0.5, 0.99, 0.999))
    assert tail.too_few_samples == ["p99", "p99.9"]  # 999 faces: p99 needs 1,000 and p99.9 10,000
    assert tail_of([100.0] * 1000, (0.99,)).too_few_samples == []


def test_repeats_merge_histograms_not_quantiles() -> None:
    fast, slow = tail_of([10.0] * 900), tail_of([1000.0] * 100)
    merged = Tail.merged([fast, slow], (0.5, 0.95))
    assert merged.count == 1000
    assert merged.quantiles_ms["p50"] == pytest.approx(10, rel=1e-3)  # the median of all faces, not of medians
    assert merged.quantiles_ms["p95"] == pytest.approx(1000, rel=1e-3)


def test_quantiles_are_parsed_and_bad_ones_named() -> None:
    assert parse_quantiles("0.999, 0.5,0.99") == (0.5, 0.99, 0.999)
    assert quantile_key(0.999) == "p99.9" and quantile_key(0.5) == "p50"
    for text, message in (("0.5,99", "between 0 and 1"), ("x", "'x' is not a number"), ("", "no quantiles")):
        with pytest.raises(ValueError, match=message):
            parse_quantiles(text)


def test_a_window_needs_room_after_its_ramps() -> None:
    with pytest.raises(ValueError, match="leave no measurement window in 10 s"):
        Workload(mode="emulated", producers=1, consumers=1, duration_s=10, ramp_up_s=8, ramp_down_s=2)
    assert Workload(mode="emulated", producers=1, consumers=1, duration_s=10, ramp_up_s=2).window_s == 8


def _run(factor: float, stable: bool, repeat: int = 1) -> RunResult:
    identities = [_identity(i * 100, 300) for i in range(40)]
    offered = 40 if stable else 100
    return RunResult(
        run_id=f"r-x{factor:g}", workload=Workload(mode="emulated", producers=2, consumers=4, duration_s=10,
                                                   factor=factor, profile="paper"),
        driver=Driver(), repeat=repeat, brokers=3, drives_per_broker=1,
        load_started_ns=0, load_ended_ns=10**10, window_start_ns=0, window_end_ns=10**10,
        offered_faces_per_s=offered / 10, achieved_faces_per_s=4.0, produced_faces=40, identified_faces=40,
        backlog_faces=0, face_bytes_mean=37_300.0, latency=summarize(identities),
        verdict=_emulated_verdict(identities, offered),
        resources=Resources(broker_disk_write_bytes_per_s=1e6 * factor, broker_disk_read_bytes_per_s=0.0))


def test_a_factor_is_stable_when_every_repeat_held() -> None:
    sweep = _sweep(_run(1, True, 1), _run(2, True, 1), _run(1, True, 2), _run(2, False, 2))
    one, two = sweep.by_factor()
    assert (one.stable_repeats, one.stable, two.stable_repeats, two.stable) == (2, True, 1, False)
    assert sweep.highest_stable_factor == 1
    spread = two.spread(lambda run: run.offered_faces_per_s)
    assert (spread.median, spread.low, spread.high) == (7.0, 4.0, 10.0)


def _sweep(*runs: RunResult) -> SweepResult:
    return SweepResult(run_id="emu-1", profile="paper", replication_factor=3, brokers=3, drives_per_broker=1,
                       duration_s=10, kafka_client="confluent-kafka", runs=list(runs))


def test_a_sweep_round_trips_and_names_its_highest_stable_factor(tmp_path: Path) -> None:
    sweep = _sweep(_run(1, True), _run(2, True), _run(4, False), _run(8, True))
    path = write_results(sweep, tmp_path / "results.json")
    again = read_results(path, SweepResult)
    assert again == sweep
    assert again.highest_stable_factor == 2  # below the first unstable factor, even if a higher one held
    assert json.loads(path.read_text())["schema_version"] == 1


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["runs"][0]["workload"].update(producers=0),
     r"results.json: runs.0.workload.producers 0: input should be greater than or equal to 1"),
    (lambda d: d["runs"][0].pop("verdict"), r"results.json: runs.0.verdict: field required"),
    (lambda d: d.update(brokers="three"), r"results.json: brokers 'three': input should be a valid integer"),
    (lambda d: d.update(schema_version=2), r"results.json: schema_version 2: this aitax reads version 1"),
    (lambda d: d["runs"][0].update(surprise=1), r"results.json: runs.0.surprise 1: extra inputs are not permitted"),
])
def test_a_bad_results_file_is_one_line_naming_the_field(tmp_path: Path, change, message: str) -> None:
    document = json.loads(_sweep(_run(1, True)).model_dump_json())
    change(document)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document))
    with pytest.raises(UserError, match=message):
        read_results(path, SweepResult)


def test_files_that_are_not_results_are_named(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("{")
    with pytest.raises(UserError, match=r"results.json: not JSON"):
        read_results(path, SweepResult)
    with pytest.raises(UserError, match=r"absent.json: cannot read results"):
        read_results(tmp_path / "absent.json", SweepResult)


def test_a_latency_bound_is_a_condition_naming_its_quantile_and_sample() -> None:
    identities = [_identity(i * 10, 100 + (400 if i % 50 == 0 else 0)) for i in range(1000)]
    summary = summarize(identities, (0.5, 0.99, 0.999))

    def bound(ms: float):
        verdict = judge(summary, offered_faces=1000, identified_in_window=1000, produced_faces=1000,
                        identified_faces=1000, backlog_faces=0, drained=False, latency_bound=(0.99, ms))
        return verdict.conditions[-2]

    held, broken = bound(600), bound(300)
    assert held.name == "p99 within bound" and held.held and held.measured == "p99 500 ms"
    assert not broken.held and broken.required == "<= 300 ms"
    few = judge(summarize(identities[:200], (0.99,)), offered_faces=200, identified_in_window=200,
                produced_faces=200, identified_faces=200, backlog_faces=0, drained=False,
                latency_bound=(0.99, 600)).conditions[-2]
    assert few.measured.endswith("(only 200 faces: p99 wants 1000)")


def test_a_workload_names_a_bound_quantile_it_does_not_measure_and_a_real_closed_loop() -> None:
    with pytest.raises(ValueError, match=r"the bound.s quantile 0\.95 is not among the quantiles"):
        Workload(mode="emulated", producers=1, consumers=1, duration_s=10, latency_bound_ms=500,
                 latency_bound_quantile=0.95)
    with pytest.raises(ValueError, match="a closed loop"):
        Workload(mode="real", producers=1, consumers=1, duration_s=10, in_flight=2)


def test_closed_loop_points_are_grouped_apart_and_never_count_as_the_highest_stable_factor() -> None:
    closed = [_run(4, True, 1).model_copy(update={
        "workload": _run(4, True).workload.model_copy(update={"in_flight": n}), "offered_faces_per_s": None})
        for n in (4, 1)]
    sweep = _sweep(_run(1, True), _run(2, False), *closed)
    groups = sweep.by_factor()
    assert [g.label for g in groups] == ["1x", "2x", "4x 1 in flight", "4x 4 in flight"]
    assert sweep.highest_stable_factor == 1 and sweep.latency_bound is None


@pytest.mark.parametrize(("text", "ms"), [("500ms", 500.0), ("0.5s", 500.0), ("250", 250.0), (" 2S ", 2000.0)])
def test_latency_bounds_are_read_in_ms_or_s(text: str, ms: float) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(("text", "message"), [("fast", "'fast': expected a duration such as 500ms"),
                                               ("0ms", "'0ms': must be > 0")])
def test_bad_latency_bounds_are_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration_ms(text)


def test_the_sweep_table_ends_with_the_papers_figure_for_its_workload() -> None:
    from aitax.emulation.plots import format_table

    faces = _sweep(_run(1, True), _run(2, True), _run(4, False))
    assert format_table(faces)[-1] == "highest stable factor: 2x (paper, 3 brokers x 1 NVMe: 6x)"
    assert "65%" in format_table(faces)[2]  # the paper's broker-wait share at 1x (Fig. 10) beside ours
    # A profile derived from a real Object Detection run has its own name: the runs say what application they are.
    frames = faces.model_copy(update={"profile": "od-real-1", "runs": [
        run.model_copy(update={"workload": run.workload.model_copy(update={"application": "object-detection"})})
        for run in faces.runs]})
    assert "65%" not in format_table(frames)[2]
    assert format_table(frames)[-1] == (
        "highest stable factor: 2x (paper's Object Detection: latency degrades after 4x, passes 3 s at 12x, grows "
        "without bound from 16x; 630 FPS at 1x from 21 streams, broker wait 629 ms)")


def test_the_sweep_table_plots_and_page_show_every_point_and_the_bound(tmp_path: Path) -> None:
    from aitax.emulation.plots import format_table, write_html, write_plots

    bound = {"latency_bound_ms": 500.0}
    open_loop = [_run(f, f < 4, repeat) for f in (1, 2, 4) for repeat in (1, 2)]
    open_loop = [r.model_copy(update={"workload": r.workload.model_copy(update=bound)}) for r in open_loop]
    closed = _run(2, True).model_copy(update={
        "workload": _run(2, True).workload.model_copy(update={"in_flight": 8}), "offered_faces_per_s": None})
    sweep = _sweep(*open_loop, closed).model_copy(update={"repeats": 2})
    lines = format_table(sweep)
    rows = {line.split()[0] + (" " + line.split()[1] if "flight" in line else ""): line for line in lines[2:]}
    assert "stable 2/2" in rows["1x"] and "UNSTABLE 0/2" in rows["4x"]
    assert rows["2x 8"].split()[6] == "-"  # a closed loop offers no rate
    assert all(rows[point].count("*") == 3 for point in ("1x", "2x", "4x", "2x 8"))  # 40-80 faces: p90.. flagged
    assert lines[-1] == "latency-bounded throughput (p99 <= 500 ms, every condition held, 3 brokers): 2x, 4 faces/s"
    figures = write_plots(sweep, tmp_path / "plots")
    assert [f.name for f in figures] == ["fig10_latency_throughput.png", "fig11_bandwidth.png",
                                         "latency_quantiles.png", "throughput_latency.png"]
    page = write_html(sweep, figures, tmp_path / "sweep.html").read_text()
    assert page.count("data:image/png;base64,") == 4 and "2x 8 in flight" in page


def _at_p50(factor: float, p50_ms: float, stable: bool = True) -> RunResult:
    """A run at `factor` whose faces all took `p50_ms` end to end."""
    identities = [_identity(i * 100, p50_ms) for i in range(40)]
    return _run(factor, stable).model_copy(update={"latency": summarize(identities)})


def test_the_knee_is_the_first_factor_whose_p50_leaves_its_low_load_level() -> None:
    # Latency falls as compute gets faster, then jumps 45x at 16x: the paper's runaway test alone would call 16x
    # stable (the latency did not grow within the run), the knee does not.
    sweep = _sweep(_at_p50(1, 600), _at_p50(2, 300), _at_p50(4, 120), _at_p50(8, 42), _at_p50(16, 1900),
                   _at_p50(32, 80))
    assert sweep.knee is not None and sweep.knee.factor == 16
    assert "45.2x the 42 ms at 8x" in sweep.knee.reason
    assert sweep.highest_stable_by_runaway == 32 and sweep.highest_stable_factor == 8


def test_a_sweep_whose_latency_only_falls_has_no_knee_and_a_rise_within_the_multiple_is_not_one() -> None:
    assert _sweep(_at_p50(1, 600), _at_p50(2, 310), _at_p50(4, 160)).knee is None
    sweep = _sweep(_at_p50(1, 600), _at_p50(2, 300), _at_p50(4, 590))  # 1.97x the lowest below
    assert sweep.knee is None and sweep.highest_stable_factor == 4
    assert _sweep(_at_p50(1, 600), _at_p50(2, 300), _at_p50(4, 610)).knee.factor == 4


def test_an_unstable_factor_below_the_knee_still_bounds_the_highest_stable_one() -> None:
    sweep = _sweep(_at_p50(1, 600), _at_p50(2, 300, stable=False), _at_p50(4, 2000))
    assert sweep.knee.factor == 4 and sweep.highest_stable_factor == 1


def test_the_table_names_the_knee_both_readings_and_what_was_not_run() -> None:
    from aitax.emulation.plots import format_table

    sweep = _sweep(_at_p50(1, 600), _at_p50(2, 300), _at_p50(4, 1000)).model_copy(
        update={"skipped_factors": [8.0, 16.0]})
    lines = format_table(sweep)
    assert "stable+knee 1/1" in lines[4]
    assert lines[-4:-1] == [
        "not run (--stop-after: the sweep ended past the knee): 8x, 16x",
        "knee: 4x, p50 1000 ms is 3.3x the 300 ms at 2x (the knee: above 2x the lowest p50 below)",
        "the paper's test alone (every condition of a run, latency not running away within it): 4x"]
    assert lines[-1].startswith("highest stable factor: 2x (")


def test_a_failed_stage_process_is_a_condition_of_the_run_not_an_exception() -> None:
    identities = [_identity(i * 100, 300) for i in range(40)]
    verdict = judge(summarize(identities), offered_faces=40, identified_in_window=40, produced_faces=40,
                    identified_faces=40, backlog_faces=0, drained=False,
                    process_failures=["consumers-0: exit -9, log /x/consumers-0.log: killed"])
    assert not verdict.held
    assert verdict.reasons == ["stage processes ran: consumers-0: exit -9, log /x/consumers-0.log: killed "
                               "(required: none failed)"]


def test_a_fault_is_judged_by_named_conditions_and_reads_back(tmp_path: Path) -> None:
    from aitax.runs.results import FaultResult, FaultResults, judge_fault

    def failed(**counts) -> list[str]:
        base = {"acknowledged": 100, "in_topic": 100, "lost": 0, "isr_restored": True, "process_failures": []}
        verdict = judge_fault(**{**base, **counts})
        return [c.name for c in verdict.conditions if not c.held]

    assert failed() == []
    assert failed(in_topic=99) == ["acknowledged faces kept"]
    assert failed(lost=1) == ["no acknowledged face lost"]
    assert failed(isr_restored=False) == ["replicas back in sync"]
    assert failed(process_failures=["consumers-0: exit 1"]) == ["stage processes ran"]
    assert failed(events={"ingest": 9}, expected_events={"ingest": 10}) == ["every event reached Elasticsearch"]
    assert failed(events={"ingest": 10, "deliver": 3}, expected_events={"ingest": 10}) == []  # others not counted
    names = [c.name for c in judge_fault(acknowledged=1, in_topic=1, lost=0, isr_restored=None,
                                         process_failures=[]).conditions]
    assert names == ["acknowledged faces kept", "no acknowledged face lost", "stage processes ran"]

    verdict = judge_fault(acknowledged=10, in_topic=10, lost=2, isr_restored=None, process_failures=[])
    result = FaultResult(scenario="consumer-kill", offered_faces_per_s=40, acknowledged=10, in_topic=10,
                         identified=8, duplicates=0, lost=2, stall_s=0.5, isr_restored=None, verdict=verdict)
    path = write_results(FaultResults(results=[result]), tmp_path / "faults.json")
    assert read_results(path, FaultResults).results == [result]
    assert json.loads(path.read_text())["schema_version"] == 1


def test_a_runs_latency_line_gives_the_mean_and_p90_as_multiples_of_p50() -> None:
    from aitax.load.engine import tail_line
    from aitax.telemetry.latency import LatencySummary

    samples = [50.0] * 80 + [200.0] * 20  # p90 in the slow fifth: 4x p50, the mean 1.6x
    latency = LatencySummary(faces=100, mean_ms=80.0, p50_ms=50.0, p99_ms=200.0, tail=tail_of(samples),
                             breakdown_ms={}, broker_wait_share=0.0, batch_sizes={1: 100})
    assert tail_line(latency) == "p50 50 ms, mean 80 ms (1.6x p50), p90 200 ms (4.0x p50), p99 200 ms"
