"""The emulator against real brokers: every field of a factor's result, and verdicts that can fail."""

from __future__ import annotations

import itertools
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from aitax.emulation.profile import paper_profile
from aitax.emulation.sweep import (
    SweepPlan,
    SweepSpec,
    delete_topics,
    emulated_load,
    emulated_workload,
    run_factor,
    run_sweep,
)
from aitax.load.engine import run_load
from aitax.pipeline.transport.readback import read_identities
from aitax.runs.results import Driver, SweepResult
from aitax.stack.config import StackConfig
from aitax.telemetry.latency import BREAKDOWN
from tests.verdicts import assert_held

pytestmark = pytest.mark.integration


def _spec(producers: int, consumers: int, duration_s: float = 8.0, factors: tuple[float, ...] = (1.0,),
          **load: object) -> SweepSpec:
    return SweepSpec(SweepPlan(list(factors)), emulated_workload(producers, consumers, 1, duration_s, "paper", **load),
                     Driver(), paper_profile())


def test_light_load_is_stable_and_reports_every_field(stack: StackConfig, tmp_path: Path, unique_name: str) -> None:
    # 1 stream at 10 faces/s; 3 consumers at 131.5 ms per face can take 22 faces/s.
    result = run_factor(_spec(producers=1, consumers=3), stack, 1.0, unique_name, tmp_path)
    assert_held(result.verdict, "throughput", "stage processes ran")
    assert [c.name for c in result.verdict.conditions] == ["throughput", "latency bounded", "stage processes ran"]
    assert result.offered_faces_per_s == pytest.approx(10.0)
    assert result.achieved_faces_per_s >= 8.0
    assert result.produced_faces >= result.identified_faces >= 70
    assert result.face_bytes_mean == pytest.approx(37_300)
    # Latency counts the faces captured in the measurement window: after the 2 s ramp-up, 6 s of 10 faces/s.
    assert result.latency is not None and 50 <= result.latency.faces < result.identified_faces
    assert result.window_start_ns - result.load_started_ns == 2_000_000_000
    assert result.latency.tail.count == result.latency.faces
    assert result.latency.tail.too_few_samples == ["p90", "p99", "p99.9"]  # 60 faces: p90 needs 100
    # One face takes at least its emulated compute: 18.8 + 74.8 + 131.5 ms.
    assert result.latency.mean_ms > 225
    assert list(result.latency.breakdown_ms) == [name for name, _, _ in BREAKDOWN]  # every stage, every owner
    # A face waits for its whole batch's emulated compute: at least its own 131.5 ms.
    assert result.latency.breakdown_ms["identify"] >= 131.5 * 0.95
    used = result.resources
    assert set(used.broker_write_bytes_per_s) == set(stack.node_ids)
    # RF 3: every broker writes the thumbnails' bytes (10 x 37.3 kB/s), give or take Kafka's own overhead.
    assert used.broker_disk_write_bytes_per_s > 100_000
    assert 0 < used.machine_cpu_busy <= 1
    assert set(used.client_cpu_cores) == {"the emulator's producers", "the emulator's consumers"}
    assert used.saturated and result.brokers == stack.brokers and result.process_failures == []
    assert result.window_end_ns - result.window_start_ns == 6_000_000_000  # 8 s of load less the ramp-up


def test_overload_is_judged_unstable(stack: StackConfig, tmp_path: Path, unique_name: str) -> None:
    # 3 streams offer 30 faces/s; one consumer can take 7.6 faces/s: faces pile up in the brokers.
    result = run_factor(_spec(producers=3, consumers=1), stack, 1.0, unique_name, tmp_path)
    assert not result.stable
    assert result.verdict.reasons[0].startswith("throughput: identified")
    assert result.achieved_faces_per_s < 0.5 * result.offered_faces_per_s
    sweep = SweepResult(run_id="r", profile="paper", replication_factor=3, brokers=3, drives_per_broker=1,
                        duration_s=8, kafka_client="confluent-kafka", runs=[result])
    assert sweep.highest_stable_factor is None


def test_bad_input_is_refused_before_anything_starts(stack: StackConfig) -> None:
    for args, message in ((["--factors", "0,2"], "every factor must be > 0"),
                          (["--brokers", "5"], "the running stack has 3"),
                          (["--profile", "nope"], "neither a built-in")):
        result = subprocess.run([sys.executable, "-m", "aitax.cli", "emulate", *args], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_shipped_workload_and_driver_files_run_and_their_results_record_them(stack: StackConfig,
                                                                                   tmp_path: Path) -> None:
    """OpenMessaging Benchmark's shape: a workload file and a driver file, a flag (the duration) over the file."""
    from aitax.runs.results import read_results

    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, "-m", "aitax.cli", "emulate",
                             "--workload", "benchmarks/workloads/face-recognition-paper.yaml",
                             "--driver", "benchmarks/drivers/kafka-batched.yaml", "--factors", "1", "--duration", "8",
                             "--warmup", "0", "--drain", "5", "--out", str(out)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = read_results(out, SweepResult).runs
    workload, driver = run.workload, run.driver
    assert (workload.producers, workload.consumers, workload.producer_processes, workload.duration_s) == (4, 8, 2, 8)
    assert (driver.max_batch, driver.max_queue_delay_ms, driver.kafka_client) == (32, 10.0, "confluent-kafka")
    assert run.identified_faces > 0


def test_a_closed_loop_keeps_its_frames_in_flight(stack: StackConfig, tmp_path: Path, unique_name: str) -> None:
    # 2 streams keeping 2 frames each (the paper profile: one face per frame) at 4x.
    spec = _spec(producers=2, consumers=3)
    spec = replace(spec, plan=replace(spec.plan, in_flight=(2,)))
    load = emulated_load(spec, stack, 4.0, unique_name, tmp_path, in_flight=2)
    result = run_load(load, stack=stack)
    identities, _ = read_identities(stack.bootstrap_servers, load.run_id, topic=load.topics.identities)
    delete_topics(stack, load.topics)
    assert_held(result.verdict, "every acknowledged face identified", "stage processes ran")
    assert result.offered_faces_per_s is None and result.workload.in_flight == 2
    assert [c.name for c in result.verdict.conditions] == ["every acknowledged face identified", "latency bounded",
                                                          "stage processes ran"]
    # At no moment does a stream hold more than 2 frames between admission and identity; mostly it holds 2.
    for stream in {i.stream_id for i in identities}:
        changes = sorted([(i.scheduled_ns, 1) for i in identities if i.stream_id == stream]
                         + [(i.identified_ns, -1) for i in identities if i.stream_id == stream])
        held = list(itertools.accumulate(change for _, change in changes))
        assert max(held) == 2, stream
    # Open loop at 4x would offer 2 x 40 faces/s; the closed loop takes only what completes.
    assert 5 < result.achieved_faces_per_s < 60


def test_three_stages_send_frames_through_kafka_to_emulated_detect_instances(
        stack: StackConfig, tmp_path: Path, unique_name: str) -> None:
    """The paper's Fig. 3a emulated: ingest instances publish frame-sized records to the run's frames topic, one
    emulated detect instance per stream reads them, faces reach identify as in two stages."""
    from aitax.emulation.profile import FRAME_JPEG_BYTES

    spec = _spec(producers=2, consumers=4, stages=3)
    load = emulated_load(spec, stack, 1.0, unique_name, tmp_path)
    result = run_load(load, offered_faces_per_s=spec.offered_faces_per_s(1.0), stack=stack)
    delete_topics(stack, load.topics)
    assert_held(result.verdict, "throughput", "stage processes ran")
    assert result.workload.stages == 3 and result.process_failures == []
    assert result.identified_faces == result.produced_faces >= 100  # 2 streams x 10 faces/s x 8 s, less start-up
    assert set(load.pids()) == {"the emulator's producers", "the emulator's consumers", "detect"}
    # Each frame waits in Kafka between ingest and detect now; the brokers write frames, not only thumbnails.
    assert result.latency is not None and result.latency.breakdown_ms["frame_queue"] > 0.5
    frame_bytes = 2 * 10 * min(FRAME_JPEG_BYTES)
    assert result.resources is not None and result.resources.broker_disk_write_bytes_per_s > frame_bytes


def test_a_point_whose_consumer_cannot_leave_its_group_and_whose_producer_dies_is_recorded_and_the_sweep_goes_on(
        stack: StackConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 1x the identify process is frozen (SIGSTOP: it can neither consume nor leave its group, nor obey
    SIGINT) and the producer process is killed mid-load. The point is a result: its failure named with its log,
    the frozen consumer killed and noted, its backlog counted. 2x then runs on topics and a group of its own."""
    import os
    import signal
    import time

    from aitax.load import local

    monkeypatch.setattr(local, "STOP_TIMEOUT_S", 5.0)
    monkeypatch.setenv("AITAX_HOME", str(tmp_path))
    start_producers = local.LocalLoad.start_producers
    sabotaged: list[str] = []

    def start_then_sabotage(load: local.LocalLoad) -> None:
        start_producers(load)
        if sabotaged:
            return
        sabotaged.append(load.run_id)
        os.kill(load.consumers[0].pid, signal.SIGSTOP)
        time.sleep(3)
        os.kill(load.producers[0].pid, signal.SIGKILL)

    monkeypatch.setattr(local.LocalLoad, "start_producers", start_then_sabotage)
    spec = _spec(producers=1, consumers=3, duration_s=8.0, factors=(1.0, 2.0), drain_s=3.0)
    sweep = run_sweep(spec, stack, progress=lambda _: None, out=tmp_path / "results.json")

    frozen, after = sweep.runs
    assert sabotaged == [frozen.run_id]
    assert len(frozen.process_failures) == 1 and frozen.process_failures[0].startswith("producers-0: exit -9, log ")
    assert frozen.process_failures[0].split(", log ")[1].split(":")[0].endswith("producers-0.log")
    assert not frozen.stable and "stage processes ran: producers-0: exit -9" in " ".join(frozen.verdict.reasons)
    killed = [note for note in frozen.notes if "did not exit within 5 s of SIGINT and was killed" in note]
    assert killed and killed[0].startswith("consumers-0 ")
    # The killed producer never reported what it produced: the faces the brokers hold for the run are the count.
    assert frozen.identified_faces == 0 and frozen.backlog_faces == frozen.produced_faces > 0
    # The next point inherited nothing: every face it produced was identified, in its own group.
    assert_held(after.verdict, "throughput", "stage processes ran")
    assert after.process_failures == [] and after.backlog_faces == 0
    assert after.identified_faces == after.produced_faces > 0
    assert sweep.skipped_factors == []
