"""An experiment spec on the local backend: each phase runs through the load engine and keeps its RunResult."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aitax.runs.results import THROUGHPUT_FLOOR, RunResult
from aitax.stack.config import StackConfig
from tests.verdicts import assert_held

pytestmark = pytest.mark.integration


def test_each_phase_of_an_emulated_experiment_is_a_judged_run(stack: StackConfig, tmp_path: Path,
                                                                unique_name: str) -> None:
    name = unique_name.lower().replace("_", "-")[-30:].strip("-")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
name: {name}
mode: emulated
profile: paper
phases:
  - name: native
    duration: 10s
    replicas: {{emulate-producers: 1, emulate-consumers: 1}}
    instances: {{producers: 1, consumers: 3}}
  - name: twice
    duration: 10s
    factor: 2
""")
    result = subprocess.run([sys.executable, "-m", "aitax.cli", "experiment", "run", str(spec), "--backend", "local",
                             "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (results_file,) = (tmp_path / "out").glob(f"{name}-*.json")
    phases = json.loads(results_file.read_text())["phases"]
    assert [phase["phase"] for phase in phases] == ["native", "twice"]
    for phase, factor in zip(phases, (1.0, 2.0), strict=True):
        run = RunResult.model_validate(phase["run"])
        assert run.run_id == phase["run_id"] and run.workload.factor == factor
        assert (run.workload.producers, run.workload.consumers, run.workload.consumer_processes) == (1, 3, 1)
        # Judged against its own window: whether 10 s of a shared 2-core machine carried >= 90% in the window is
        # a timing matter (88% once while the suite ran, every time alone), so the test holds the judging, and
        # every face identified, not the timing.
        assert_held(run.verdict, "stage processes ran")
        throughput = next(c for c in run.verdict.conditions if c.name == "throughput")
        in_window = round(run.achieved_faces_per_s * run.workload.window_s)
        offered = round(run.offered_faces_per_s * run.workload.window_s)
        assert throughput.measured.startswith(f"identified {in_window} of {offered} offered faces")
        assert throughput.held == (in_window / offered >= THROUGHPUT_FLOOR)
        assert run.identified_faces >= run.produced_faces > 0 and run.process_failures == []
        assert run.resources is not None and run.latency is not None
        assert run.offered_faces_per_s == pytest.approx(10 * factor)  # 1 stream of the paper profile
    # What the kubernetes backend asks from inside a pod: `aitax collect` reads the same run back from the topics.
    from aitax.pipeline.transport.readback import Collected

    run = RunResult.model_validate(phases[1]["run"])
    since_ms = run.load_started_ns // 1_000_000 - 60_000  # as a cluster phase asks: records from its start only
    answer = subprocess.run([sys.executable, "-m", "aitax.cli", "collect", "--run-id", run.run_id, "--group",
                             f"identify-{run.run_id}", "--since-ms", str(since_ms), "--bootstrap",
                             stack.bootstrap_servers],
                            capture_output=True, text=True, timeout=300)
    assert answer.returncode == 0, answer.stderr[-2000:]
    (line,) = answer.stdout.splitlines()  # one JSON line, no thumbnail
    collected = Collected.model_validate_json(line)
    readback, group = collected.readback, collected.group
    assert (readback.run_id, readback.produced_faces, readback.identified_faces, readback.duplicates) == (
        run.run_id, run.produced_faces, run.identified_faces, run.duplicates)
    assert len(readback.timelines) == run.identified_faces
    assert readback.face_bytes_mean == pytest.approx(run.face_bytes_mean, rel=0.02)
    assert all(t.scheduled_ns <= t.ingested_ns <= t.identify_start_ns < t.identified_ns <= t.delivered_ns
               for t in readback.timelines)
    assert (group.group, group.topic, group.members, group.state) == (f"identify-{run.run_id}", "faces", 0, "EMPTY")
    assert group.partitions >= 1
