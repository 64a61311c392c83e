"""Emulation profiles, the stability verdict, and the promise that emulation runs the pipeline's own code."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from aitax.common.errors import UserError
from aitax.emulation import workers
from aitax.emulation.profile import Distribution, derive_profile, load_profile, paper_profile
from aitax.load.resources import saturated_resource
from aitax.pipeline import identify, ingest_detect


def test_emulated_stages_are_the_pipelines_own_loops() -> None:
    # The emulator's honesty rests on this: only the compute functions differ.
    assert workers.detect_loop is ingest_detect.detect_loop
    assert workers.identify_loop is identify.identify_loop


def test_distribution_samples_follow_its_quantiles() -> None:
    distribution = Distribution(((0.0, 10.0), (0.5, 20.0), (0.99, 100.0), (1.0, 200.0)))
    rng = random.Random(1)
    samples = sorted(distribution.sample(rng) for _ in range(20_000))
    assert samples[len(samples) // 2] == pytest.approx(20.0, rel=0.03)
    assert samples[int(len(samples) * 0.9)] == pytest.approx(20 + 80 * 0.4 / 0.49, rel=0.03)  # 0.9 quantile
    assert distribution.quantile(0.25) == 15.0
    assert distribution.mean() == pytest.approx(0.5 * 15 + 0.49 * 60 + 0.01 * 150)


def test_paper_profiles() -> None:
    paper = paper_profile()
    assert paper.compute_ms["detect"].mean() == 74.8
    assert paper.compute_ms["identify"].mean() == 131.5
    assert paper.thumbnail_bytes.mean() == 37_300
    assert paper.mean_faces_per_frame() == 1.0
    video = load_profile("paper-video")
    assert video.mean_faces_per_frame() == pytest.approx(0.64)
    assert max(video.faces_per_frame) == 5
    assert paper.scaled_faces(0.25).thumbnail_bytes.mean() == pytest.approx(9_325)


def test_object_detection_sends_every_frame_whole_to_a_687_ms_detector() -> None:
    """The paper's second application on the same loops (Sec. 6): one payload per frame, frame-sized, 30 FPS,
    no AI before Kafka, the R-CNN's time where identify's is; one stream needs about 21 detection instances."""
    from aitax.runs.applications import APPLICATIONS

    profile = load_profile("object-detection")
    assert profile.faces_per_frame == {1: 1.0} and profile.fps == 30.0
    assert profile.compute_ms["ingest"].mean() == 4.5 and profile.compute_ms["detect"].mean() == 0.0
    assert profile.compute_ms["identify"].mean() == 687.0
    assert 100_000 < profile.thumbnail_bytes.mean() < 1024 * 1024  # a JPEG frame, under Kafka's 1 MB default
    assert profile.offered_faces_per_s(1, 4) == 120.0  # at 4x, 4 frames per 33.3 ms tick
    workload = APPLICATIONS["object-detection"].emulated
    assert workload.consumers * 1000 / profile.compute_ms["identify"].mean() > profile.fps  # keeps up at 1x
    assert load_profile(APPLICATIONS["face-recognition"].emulated.profile) == paper_profile()


def test_profile_round_trips_through_yaml(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(load_profile("paper-video").to_yaml())
    loaded = load_profile(str(path))
    assert loaded.faces_per_frame == pytest.approx(load_profile("paper-video").faces_per_frame)
    assert loaded.compute_ms["ingest"].mean() == 18.8
    path.write_text(load_profile("object-detection").to_yaml())
    assert load_profile(str(path)) == load_profile("object-detection")  # its application and rate included


@pytest.mark.parametrize(("text", "message"), [
    ("version: 1\nname: x\n", "bad.yaml: compute_ms: field required"),
    ("version: 2\n", "profile version 2"),
    ("version: 1\nname: x\ncompute_ms: {ingest: [[0, 1], [1, 2]], detect: [[0, 1], [1, 2]]}\n"
     "thumbnail_bytes: [[0, 1], [1, 2]]\nfaces_per_frame: {1: 1}\n", "bad.yaml: compute_ms: lacks stage identify"),
    ("version: 1\nname: x\ncompute_ms: {ingest: [[0, 1], [1, 2]], detect: [[0, 1], [1, 2]], "
     "identify: [[0.5, 1], [1, 2]]}\nthumbnail_bytes: [[0, 1], [1, 2]]\nfaces_per_frame: {1: 1}\n",
     "bad.yaml: compute_ms.identify: must start at quantile 0 and end at quantile 1"),
    ("version: 1\nname: x\ncompute_ms: {ingest: [[0, 1], [1, 2]], detect: [[0, 1], [1, 2]], "
     "identify: [[0, 1], [1, 2]]}\nthumbnail_bytes: [[0, 1], [1, 2]]\nfaces_per_frame: {1: 0.5}\n",
     "faces_per_frame: probabilities must sum to 1"),
    ("version: 1\nname: x\ncompute_ms: {ingest: [[0, 1], [1, 2]], detect: [[0, 1], [1, 2]], "
     "identify: [[0, 1], [1, 2]]}\nthumbnail_bytes: [[0, 1], [1, 2]]\nfaces_per_frame: {1: 1}\nfps: fast\n",
     "fps 'fast': input should be a valid number"),
])
def test_bad_profiles_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_profile(str(path))


def test_unknown_profile_is_an_error() -> None:
    with pytest.raises(UserError, match="neither a built-in"):
        load_profile("no-such-profile")


def test_profile_derived_from_events_has_their_quantiles() -> None:
    events = [{"stage": "ingest", "compute_time_ms": float(v)} for v in range(1, 101)]
    events += [{"stage": "detect", "compute_time_ms": 50.0 + v, "face_count": v % 3} for v in range(100)]
    events += [{"stage": "identify", "compute_time_ms": 100.0, "data_size_bytes": 40_000} for _ in range(99)]
    profile = derive_profile(events, "r")
    assert profile.compute_ms["ingest"].quantile(0.5) == pytest.approx(50.5)
    assert profile.compute_ms["ingest"].quantile(0.99) == pytest.approx(99.01)
    assert profile.compute_ms["detect"].quantile(0.0) == 50.0
    assert profile.compute_ms["identify"].mean() == 100.0
    assert profile.thumbnail_bytes.mean() == 40_000
    assert profile.faces_per_frame == {0: 0.34, 1: 0.33, 2: 0.33}
    with pytest.raises(UserError, match="0 identify events"):
        derive_profile([e for e in events if e["stage"] != "identify"], "r")


def test_a_profile_replays_the_faces_each_frame_of_the_video_held(tmp_path: Path) -> None:
    from aitax.emulation.workers import EmulatedFaceFinder
    from aitax.telemetry.timing import Stopwatch

    video = [0, 0, 3, 3, 1, 0]  # bursts: what a stream of the real video meets, frame after frame
    events = [{"stage": "ingest", "compute_time_ms": 1.0}, {"stage": "identify", "compute_time_ms": 1.0}]
    events += [{"stage": "detect", "compute_time_ms": 1.0, "stream_id": stream, "frame_index": i, "face_count": n}
               for stream in ("cam-1", "cam-2") for i, n in enumerate(video)]
    profile = derive_profile(events, "r")
    assert profile.faces_sequence == tuple(video)
    path = tmp_path / "p.yaml"
    path.write_text(profile.to_yaml())
    assert load_profile(str(path)).faces_sequence == tuple(video)
    instant = derive_profile([{**e, "compute_time_ms": 0.0} for e in events], "r")
    finder = EmulatedFaceFinder(instant, 1.0, random.Random(1))
    # one finder per stream sees its frames in order: the replayed counts, looped past the end
    assert [len(finder(None, Stopwatch())) for _ in range(8)] == video + video[:2]  # type: ignore[arg-type]
    # a frame no stream saw (or a resumed run) leaves counts drawn per frame
    assert derive_profile([e for e in events if e.get("frame_index") != 3], "r").faces_sequence is None
    assert derive_profile([e for e in events if e.get("frame_index") != 0], "r").faces_sequence is None


def test_a_profile_from_an_object_detection_run_puts_detection_where_identification_stands() -> None:
    events = [{"stage": "ingest", "stream_id": "cam-1", "frame_index": i, "scheduled_ns": i * 33_333_333,
               "compute_time_ms": 5.0, "data_size_bytes": 140_000} for i in range(31)]
    events += [{"stage": "detect", "compute_time_ms": 20.0 + i, "object_count": i % 3} for i in range(31)]
    profile = derive_profile(events, "od")
    assert profile.compute_ms["ingest"].mean() == 5.0 and profile.compute_ms["detect"].mean() == 0.0
    assert profile.compute_ms["identify"].quantile(0.5) == pytest.approx(35.0)
    assert profile.thumbnail_bytes.mean() == 140_000 and profile.faces_per_frame == {1: 1.0}
    assert profile.fps == pytest.approx(30.0)  # the stream's own rate, from its schedule
    assert profile.application == "object-detection"  # its sweeps print the paper's Object Detection figures
    with pytest.raises(UserError, match="0 ingest and 31 detect events"):
        derive_profile([e for e in events if e["stage"] != "ingest"], "od")


def _usage(cpu: float = 0.3, write: float = 1e6, handlers: float = 0.2, network: float = 0.1,
           consumers_cores: float = 0.2, under_min_isr: int = 0, busy: float = 0.05):
    from aitax.common.block_devices import DeviceUsage
    from aitax.load.resources import Usage

    return Usage(20.0, broker_cpu_cores={1: 0.3, 2: 0.3, 3: 0.3}, broker_write_bytes_per_s={1: write, 2: write},
                 machine_cores=2,
                 devices={"vda": DeviceUsage("vda", 0.0, 3 * write, 0.0, 100.0, busy)},
                 broker_devices={1: ["vda"], 2: ["vda"], 3: ["vda"]},
                 machine_cpu_busy=cpu, broker_handler_busy={1: handlers, 2: handlers / 2},
                 broker_network_busy={1: network}, under_min_isr_partitions=under_min_isr, produce_p99_ms=40,
                 fetch_p99_ms=500, role_cpu_cores={"the emulator's consumers": consumers_cores,
                                                   "the emulator's producers": 0.1})


def test_saturated_resource_names_the_busiest_and_who_burnt_the_cpu() -> None:
    brokers_busy = saturated_resource(_usage(cpu=0.97), None)
    assert brokers_busy.startswith("cpu (machine) at 97%, mostly the brokers (0.90 cores;")
    assert "other processes 0.74" in brokers_busy  # 2 cores x 97%, less what the brokers and the load burnt
    emulator_busy = saturated_resource(_usage(cpu=0.97, consumers_cores=1.2), None)
    assert emulator_busy.startswith("cpu (machine) at 97%, mostly the emulator's consumers (1.20 cores;")
    # storage is judged by the device's busy time, whatever it wrote: no capacity is assumed
    assert saturated_resource(_usage(write=2.0e9), None).startswith("none above")
    assert saturated_resource(_usage(busy=0.91), None).startswith("broker storage (vda, brokers 1,2,3) at 91%")
    handlers = saturated_resource(_usage(handlers=0.92, cpu=0.8, under_min_isr=2), None)
    assert handlers.startswith("the brokers' request handlers at 92%")
    assert "2 partition(s) under min ISR" in handlers and "fetch p99 500 ms" in handlers
    assert "none above" in saturated_resource(_usage(), None)


def test_broker_signals_per_window() -> None:
    from aitax.load.resources import Sample, usage_between

    def sample(at: float, idle_ns: float, network_idle: float) -> Sample:
        return Sample(at, {1: at}, {1: 0}, {1: 0}, at, 2 * at, 0,
                      {1: {"handler_idle_ns": idle_ns, "network_idle": network_idle, "produce_p99_ms": 12.0}},
                      {"the emulator's consumers": at / 4})

    usage = usage_between(sample(10.0, 4e9, 0.9), sample(20.0, 6e9, 0.4))
    assert usage.broker_handler_busy[1] == pytest.approx(0.8)  # idle 2 s of 10 s
    assert usage.broker_network_busy[1] == pytest.approx(0.6)
    assert usage.produce_p99_ms == 12.0
    assert usage.role_cpu_cores == {"the emulator's consumers": pytest.approx(0.25)}


def paper_sweep(factors: list[float], latency_bound_ms: float | None = None, **plan):
    """The sweep `make emulate-accel` runs (4 streams, 8 identify instances, 2 processes a side), 10 s points."""
    from aitax.emulation.sweep import SweepPlan, SweepSpec, emulated_workload
    from aitax.runs.results import Driver

    load = emulated_workload(4, 8, 2, 10, "paper", latency_bound_ms=latency_bound_ms)
    return SweepSpec(SweepPlan(factors, **plan), load, Driver(), paper_profile())


@pytest.mark.parametrize(("warmup_s", "accepted"), [(0.0, True), (5.0, True), (3.0, False)])
def test_a_warm_up_is_none_or_long_enough_to_matter(warmup_s: float, accepted: bool) -> None:
    from aitax.emulation.sweep import SweepPlan

    def make() -> SweepPlan:
        return SweepPlan([1.0], warmup_s=warmup_s)

    if accepted:
        assert make().warmup_s == warmup_s
    else:
        with pytest.raises(UserError, match=r"--warmup 3: 0 \(none\) or at least 5 s"):
            make()


def test_a_closed_loop_admits_a_frame_when_every_face_of_an_earlier_one_is_identified() -> None:
    window = workers.FramesInFlight(2)
    stats = workers.ClosedLoopStats(window=window)

    def running() -> bool:
        return False

    def stopped_while_waiting():  # one wait for a slot, then the stream is stopped
        return iter([False, True]).__next__

    def admit(should_stop) -> bool:
        return next(window.admissions(should_stop), None) is not None

    assert admit(running) and admit(running)
    assert not admit(stopped_while_waiting())  # both slots taken
    stats.frame_sent("s", 0, 2)
    stats.frame_sent("s", 1, 0)  # no faces: done at once, its slot free
    assert admit(running)
    window.identified(0, 1)
    window.identified(0, 1)  # a redelivered face counts once
    assert not admit(stopped_while_waiting())
    window.identified(0, 0)  # frame 0's last face
    assert admit(running)
    window.identified(0, 0)  # a late duplicate of a finished frame frees nothing
    assert not admit(stopped_while_waiting())
    assert stats.done_through("s") == -1  # acknowledgements, not identities, move the resume point: frame 0 has none


def test_the_latency_bound_search_bisects_to_the_highest_factor_that_holds(monkeypatch, tmp_path: Path) -> None:
    from aitax.emulation import sweep as sweep_module
    from aitax.stack.config import StackConfig
    from tests.unit.results_builders import emulated_run

    probed: list[float] = []

    def run_factor(spec, config, factor, run_id, workdir, repeat=1, in_flight=None):
        probed.append(factor)
        return emulated_run(factor, stable=factor <= 5.3, writes=1e6).model_copy(
            update={"workload": emulated_run(factor, True, 1e6).workload.model_copy(
                update={"latency_bound_ms": 500.0, "quantiles": [0.5, 0.99]})})

    monkeypatch.setattr(sweep_module, "run_factor", run_factor)
    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    spec = paper_sweep([1, 32], latency_bound_ms=500)
    result = sweep_module.search_latency_bound(spec, StackConfig(), progress=lambda _: None)
    assert probed[:2] == [1, 32] and len(probed) <= 2 + 6
    assert 5.3 / 1.1 <= result.highest_stable_factor <= 5.3
    assert result.latency_bound == (0.99, 500.0)
    with pytest.raises(UserError, match="needs --latency-bound and an open loop"):
        sweep_module.search_latency_bound(
            paper_sweep([1, 32]), StackConfig())


def test_the_emulated_stages_need_no_opencv() -> None:
    """The emulator image carries no OpenCV: everything its entry points import must load without it."""
    import subprocess
    import sys

    modules = ("aitax.cli", "aitax.commands.emulated_stages", "aitax.experiment.kafka_probe", "aitax.emulation.workers",
               "aitax.pipeline.runtime", "aitax.pipeline.transport")
    # ... and the three-stage emulation's frames go out and come back without it
    three_stages = ("import random\nfrom aitax.emulation.profile import frame_jpeg_bytes\n"
                    "from aitax.emulation.workers import SyntheticFrames\n"
                    "from aitax.pipeline.schema import FrameMessage, FrameMeta\n"
                    "from aitax.pipeline.three_stage import decode_pixels\n"
                    "pixels, encoding = SyntheticFrames(frame_jpeg_bytes(), random.Random(1))(None)\n"
                    "meta = FrameMeta(run_id='r', stream_id='s', frame_index=0, width=1, height=1, encoding=encoding, "
                    "scheduled_ns=0, captured_ns=0, ingested_ns=0, decode_ms=0.0, resize_ms=0.0)\n"
                    "assert decode_pixels(FrameMessage(meta, pixels)).shape == (1, 1, 3)\n")
    script = ("import importlib, sys\nsys.modules['cv2'] = None  # any `import cv2` now raises ImportError\n"
              f"for name in {modules!r}:\n    importlib.import_module(name)\n" + three_stages)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize(("stop_after", "run", "skipped"), [(2, [1, 2, 4, 8], [16, 32]), (0, [1, 2, 4, 8, 16, 32], [])])
def test_the_sweep_ends_after_stop_after_broken_factors_in_a_row_and_lists_the_rest(
        monkeypatch, tmp_path: Path, stop_after: int, run: list[float], skipped: list[float]) -> None:
    from aitax.emulation import sweep as sweep_module
    from aitax.stack.config import StackConfig
    from tests.unit.results_builders import emulated_run

    probed: list[float] = []

    def run_factor(spec, config, factor, run_id, workdir, repeat=1, in_flight=None):
        probed.append(factor)
        return emulated_run(factor, stable=factor != 4 and factor < 8, writes=1e6)  # 4x breaks, 8x and up too

    monkeypatch.setattr(sweep_module, "run_factor", run_factor)
    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    spec = paper_sweep([1, 2, 4, 8, 16, 32], stop_after=stop_after)
    sweep = sweep_module.run_sweep(spec, StackConfig(), progress=lambda _: None, out=tmp_path / "r.json")
    assert probed == run and sweep.skipped_factors == skipped and sweep.highest_stable_factor == 2
    with pytest.raises(UserError, match="--stop-after -1"):
        paper_sweep([1], stop_after=-1)


def test_a_point_the_brokers_cannot_set_up_ends_the_sweep_with_what_it_measured(monkeypatch, tmp_path: Path) -> None:
    from aitax.emulation import sweep as sweep_module
    from aitax.emulation.plots import format_table
    from aitax.runs.results import SweepResult, read_results
    from aitax.stack.config import StackConfig
    from aitax.tco.knee import measured_knee
    from tests.unit.results_builders import emulated_run

    def run_factor(spec, config, factor, run_id, workdir, repeat=1, in_flight=None):
        if factor == 4:  # a saturated drive stalls the controller: creating the point's topics times out
            raise sweep_module.PointNotStartedError("4x not started, the brokers did not set it up: timed out")
        return emulated_run(factor, stable=True, writes=1e6)

    monkeypatch.setattr(sweep_module, "run_factor", run_factor)
    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    spec = paper_sweep([1, 2, 4, 8])
    sweep = sweep_module.run_sweep(spec, StackConfig(), progress=lambda _: None, out=tmp_path / "r.json")
    written = read_results(tmp_path / "r.json", SweepResult)
    assert [r.workload.factor for r in written.runs] == [1, 2] and written.skipped_factors == [4, 8]
    assert written.stopped.startswith("4x not started") and measured_knee(sweep) == 4
    assert any(line.startswith("stopped: 4x not started") for line in format_table(written))


def test_brokers_that_cannot_serve_the_warm_up_end_the_sweep_before_its_first_factor(monkeypatch,
                                                                                    tmp_path: Path) -> None:
    from aitax.emulation import sweep as sweep_module
    from aitax.emulation.plots import format_table, write_plots
    from aitax.runs.results import SweepResult, read_results
    from aitax.stack.config import StackConfig
    from aitax.tco.knee import measured_knee

    def run_factor(spec, config, factor, run_id, workdir, repeat=1, in_flight=None):
        raise sweep_module.PointNotStartedError("1x not started, the brokers did not set it up: timed out")

    monkeypatch.setattr(sweep_module, "run_factor", run_factor)
    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    spec = paper_sweep([1, 2], warmup_s=10)
    sweep_module.run_sweep(spec, StackConfig(), progress=lambda _: None, out=tmp_path / "r.json")
    written = read_results(tmp_path / "r.json", SweepResult)
    assert written.runs == [] and written.skipped_factors == [1, 2] and measured_knee(written) == 1
    assert any(line.startswith("stopped: the warm-up's 1x not started") for line in format_table(written))
    write_plots(written, tmp_path / "plots")  # nothing to draw is not an error


def test_consumers_that_cannot_close_in_time_are_counted_not_waited_for() -> None:
    import threading
    import time

    from aitax.pipeline.stage_process import close_within

    release = threading.Event()
    closed: list[str] = []

    class Client:
        def __init__(self, name: str, stuck: bool) -> None:
            self.name, self.stuck = name, stuck

        def close(self) -> None:
            if self.stuck:
                release.wait(10)  # a LeaveGroup held behind a JoinGroup
            closed.append(self.name)

    started = time.monotonic()
    assert close_within([Client("a", False), Client("b", True), Client("c", False)], 0.3) == 1
    assert time.monotonic() - started < 2 and sorted(closed) == ["a", "c"]
    release.set()


def test_a_roles_cpu_counts_its_processes_children_even_after_they_exit() -> None:
    """A real ingest-detect decodes in a child process: its CPU is the role's, also once the child has ended."""
    import subprocess
    import sys

    from aitax.load.resources import _cpu_seconds

    burn = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time\n"
                               f"child = subprocess.Popen([sys.executable, '-c', {burn!r}])\n"
                               "child.wait(); time.sleep(30)"])
    try:
        pids, last_seen, deadline = [parent.pid], {}, time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:  # until the child is found
            _cpu_seconds(pids, last_seen)
            time.sleep(0.02)
        assert len(pids) == 2
        while _alive(pids[1]) and time.monotonic() < deadline:
            _cpu_seconds(pids, last_seen)
            time.sleep(0.02)
        assert _cpu_seconds(pids, last_seen) >= 0.3  # the child's burn, kept after it exited
    finally:
        parent.kill()
        parent.wait()


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
