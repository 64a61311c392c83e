"""Live cameras on a real RTSP server (GStreamer's, `aitax camera serve`'s simulator) through the real pipeline,
with faults: a restart, a camera slower than it declares, a corrupt and truncated stream, wrong credentials. No
process crashes; every frame received is detected or counted as dropped; every face detected is identified.
Reconnect times are printed, and asserted only loosely (this machine is shared): the measured ones are in the
results log."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from aitax.pipeline.camera import STALL_SHARE, CameraSource
from aitax.pipeline.camera_sim import CameraSpec, SimulatedCamera
from aitax.reporting.report import build_report
from aitax.runs.results import RunResult, read_results
from aitax.stack.config import StackConfig
from aitax.telemetry.camera_health import CameraHealth
from aitax.telemetry.event_sources import load_events
from tests.relay import Relay

pytestmark = pytest.mark.integration
AITAX = [sys.executable, "-m", "aitax.cli"]
DURATION_S = 10
STALL_S = 10
SETTLE_S = 3.0  # after the relays saw a stream flow again: for its reader to read it and its health to be reported


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class CameraRun:
    result: RunResult
    cameras: dict[str, CameraHealth]
    output: str  # the run's, then its ingest-detect processes' logs


def run_cameras(cameras: list[SimulatedCamera], gallery: Path, workdir: Path, run_id: str,
                fault: Callable[[], None] | None = None, after_s: float = 3.0, duration_s: float = DURATION_S,
                extra: tuple[str, ...] = (), urls: list[str] | None = None,
                until: Callable[[], bool] | None = None) -> CameraRun:
    """`aitax run` on the cameras (through `urls` when given). `fault` runs `after_s` into the run's load, once
    every camera's process is ready (its detector loaded, its frames flowing). With `until`, the run is ended
    (SIGTERM: drained and collected) `SETTLE_S` after `until()` holds, past the fault; `duration_s` is then a cap.
    Not SIGINT: a test run started in the background by a shell inherits it ignored."""
    events = workdir / run_id
    urls = urls or [camera.url for camera in cameras]
    process = subprocess.Popen([*AITAX, "run", *(arg for url in urls for arg in ("--camera", url)), "--gallery",
                                str(gallery), "--duration", f"{duration_s:g}", "--run-id", run_id, "--events-dir",
                                str(events), *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    statuses = [events / "logs" / f"ingest-detect-{number}.status.jsonl" for number in range(1, len(urls) + 1)]
    fault_errors: list[BaseException] = []
    interrupted = threading.Event()

    def apply_fault() -> None:
        try:
            # A fault before the run's clock starts (a loaded machine loads its detectors slowly) would leave its
            # recovery less of the run's duration than the test means to give it.
            deadline = time.monotonic() + 300
            while process.poll() is None and time.monotonic() < deadline and \
                    not all(path.is_file() and '"ready"' in path.read_text() for path in statuses):
                time.sleep(0.2)
            if process.poll() is not None:
                return
            time.sleep(after_s)
            fault()
            while until is not None and process.poll() is None and not until():
                time.sleep(0.25)
            if until is not None and process.poll() is None:
                time.sleep(SETTLE_S)
                interrupted.set()
                process.send_signal(signal.SIGTERM)
        except BaseException as error:  # raised again in the test, not lost in a thread
            fault_errors.append(error)

    if fault is not None:
        threading.Thread(target=apply_fault, daemon=True).start()
    output, _ = process.communicate(timeout=duration_s + 600)
    if fault_errors:
        raise fault_errors[0]
    assert process.returncode == (130 if interrupted.is_set() else 0), output[-4000:]
    report = build_report(run_id, load_events(run_id, events).documents)
    logs = "\n".join(path.read_text() for path in sorted((events / "logs").glob("ingest-detect-*.log")))
    return CameraRun(read_results(events / "result.json", RunResult),
                     {camera.stream_id: camera.health for camera in report.cameras}, f"{output}\n{logs}")


def assert_nothing_lost(run: CameraRun) -> None:
    held = {condition.name: condition.held for condition in run.result.verdict.conditions}
    assert held["every acknowledged face identified"], run.result.verdict.reasons
    assert run.result.process_failures == [] and run.result.identified_faces == run.result.produced_faces
    for stream_id, health in run.cameras.items():
        accounted = health.undecodable + health.dropped + health.detected
        assert health.received == accounted > 0, f"{stream_id}: frames unaccounted for: {health}"


def test_a_restart_a_stall_and_a_corrupt_then_truncated_stream_in_one_run(stack: StackConfig, video: Path,
                                                                          gallery: Path, tmp_path: Path,
                                                                          unique_name: str) -> None:
    """Three cameras, three faults at once: cam-1 restarts (off 2 s); cam-2's stream, through a relay, is corrupted
    for 2 s, then a packet is cut in half and its connection closed; cam-3's network stalls 10 s and on until its
    reader connects anew (nothing passes, its connection open). Each is read again and its gap counted. The run
    ends once every stream flowed again (or after its duration, a cap)."""
    off: dict[str, float] = {}
    stalled_for: list[float] = []
    with SimulatedCamera(CameraSpec(video, free_port())) as restarting, \
            SimulatedCamera(CameraSpec(video, free_port())) as damaged, \
            SimulatedCamera(CameraSpec(video, free_port())) as stalling:
        # cam-1 through a relay that only passes bytes: it tells when its reader is streaming
        passing, relay, link = Relay(restarting.spec.port), Relay(damaged.spec.port), Relay(stalling.spec.port)

        def faults() -> None:
            # Each fault hits a stream that flows: a camera that restarts, or a link that stalls, while its reader
            # is still opening the stream is another fault (a loaded machine once took that long to open cam-1).
            for each in (passing, relay, link):
                each.wait_streaming(2.0)
            # A reader that runs behind on a loaded machine still reads seconds of video that were on their way: a
            # fixed 10 s stall was once 3.8 s without a frame, under the reader's stall timeout (5 s).
            off["stall"] = time.monotonic()
            threading.Thread(target=lambda: stalled_for.append(link.stall(STALL_S, until_reconnect_s=STALL_S + 15)),
                             daemon=True).start()
            relay.corrupt(2.0)
            off["stopped"] = time.monotonic()
            restarting.stop()
            time.sleep(2.0)
            restarting.start(timeout_s=60)  # a loaded machine starts its server slowly
            off["back"] = time.monotonic()
            time.sleep(1.0)
            relay.cut()

        def every_stream_flows_again() -> bool:
            return bool(stalled_for) and relay.cut_at is not None and passing.streamed(2.0, off["stopped"]) and \
                relay.streamed(2.0, relay.cut_at) and link.streamed(2.0, off["stall"])

        try:
            # The cap leaves a loaded machine room: in 30 s, one run on a machine also compiling saw the stall
            # detected and a first retry find the link still silent, and ended before the next.
            run = run_cameras([restarting, damaged, stalling], gallery, tmp_path, unique_name, faults, after_s=2.0,
                              duration_s=120, urls=[passing.url(), relay.url(), link.url()],
                              until=every_stream_flows_again)
        finally:
            for each in (passing, relay, link):
                each.close()
    assert_nothing_lost(run)
    restarted, corrupted, stalled = run.cameras["cam-1"], run.cameras["cam-2"], run.cameras["cam-3"]
    assert restarted.reconnects >= 1 and restarted.connected, f"{restarted}\n{passing.timeline(off['stopped'])}"
    assert restarted.longest_gap_s >= 2.0, restarted  # the camera was off 2 s at least
    # From the camera's return to its next frame: the gap less the time it was away.
    resumed_s = restarted.longest_gap_s - (off["back"] - off["stopped"])
    print(f"restart: frames resumed {resumed_s:.2f} s after the camera came back; {restarted}")
    assert resumed_s < 10, restarted
    assert relay.packets_corrupted > 0
    print(f"corrupt + truncated: {relay.packets_corrupted} packets damaged; {corrupted}")
    assert corrupted.reconnects >= 1 and corrupted.connected, f"{corrupted}\n{relay.timeline(off['stopped'])}"
    assert "frames again after" in run.output and "Traceback" not in run.output
    assert stalled_for, "the stall did not end before the run did"
    print(f"stall {stalled_for[0]:.1f} s: longest gap {stalled.longest_gap_s:.2f} s; {stalled}")
    log = "\n".join(line for line in run.output.splitlines() if "cam-3" in line)
    diagnosis = f"{stalled}\n{log}\nlink, from the stall: {link.timeline(off['stall'])}"
    assert stalled.reconnects >= 1 and stalled.connected, diagnosis
    # The reader reconnects after its own stall timeout without a frame. Frames still on their way when the link
    # stalled (a loaded reader runs behind) shorten the gap it sees below the stall's length.
    assert STALL_SHARE * CameraSource.stall_s <= stalled.longest_gap_s < stalled_for[0] + 10, diagnosis


def test_wrong_credentials_are_one_line_and_no_retry_storm(stack: StackConfig, video: Path, tmp_path: Path,
                                                          unique_name: str) -> None:
    password, wrong = "right-horse-battery", "wrong-staple-guess"
    spec = CameraSpec(video, free_port(), user="viewer", password=password)
    with SimulatedCamera(spec) as guarded:
        started = time.monotonic()
        refused = subprocess.run([*AITAX, "ingest-detect", "--video", guarded.url, "--camera-user", "viewer",
                                  "--run-id", unique_name, "--max-frames", "5"], capture_output=True, text=True,
                                 timeout=120, env={**_environment(), "AITAX_CAMERA_PASSWORD": wrong})
        elapsed = time.monotonic() - started
        secret_file = tmp_path / "password"
        secret_file.write_text(password)
        accepted = subprocess.run([*AITAX, "ingest-detect", "--video", guarded.url, "--camera-user", "viewer",
                                   "--camera-password-file", str(secret_file), "--run-id", unique_name,
                                   "--max-frames", "5", "--events", f"file:{tmp_path / 'events'}"],
                                  capture_output=True, text=True, timeout=300, env=_environment())
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert lines[-1] == f"aitax: camera rtsp://viewer@127.0.0.1:{spec.port}/stream: refused as 'viewer' (RTSP 401); " \
                        "not retrying", refused.stderr
    assert elapsed < 60, elapsed  # one refusal, not a loop of them
    assert accepted.returncode == 0, accepted.stdout[-2000:] + accepted.stderr[-2000:]
    assert "5 frames" in accepted.stdout
    for text in (refused.stdout, refused.stderr, accepted.stdout, accepted.stderr,
                 *(path.read_text() for path in (tmp_path / "events").glob("*.jsonl"))):
        assert password not in text and wrong not in text


def _environment() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "AITAX_CAMERA_PASSWORD"}


def test_eight_cameras_at_once_over_udp_one_slower_than_it_declares(stack: StackConfig, video: Path, gallery: Path,
                                                                     tmp_path: Path, unique_name: str) -> None:
    """Eight cameras in one run, read over UDP, each with its own health; the eighth sends 1.2 frames/s while it
    declares 2, and is measured and flagged so."""
    cameras = [SimulatedCamera(CameraSpec(video, free_port(), fps=2.0)) for _ in range(7)]
    cameras.append(SimulatedCamera(CameraSpec(video, free_port(), fps=1.2, declared_fps=2)))
    try:
        for simulated in cameras:
            simulated.start()
        run = run_cameras(cameras, gallery, tmp_path, unique_name, duration_s=15,
                          extra=("--consumers", "2", "--camera-transport", "udp"))
    finally:
        for simulated in cameras:
            simulated.stop()
    assert_nothing_lost(run)
    assert sorted(run.cameras) == [f"cam-{number}" for number in range(1, 9)]
    for stream_id, health in run.cameras.items():
        print(f"{stream_id}: {health.received} received, {health.dropped} dropped, {health.detected} detected, "
              f"{health.measured_fps:.2f} fps measured, {health.declared_fps:g} declared")
    slow = run.cameras["cam-8"]
    assert slow.declared_fps == 2 and 0.9 < slow.measured_fps < 1.5, slow
    assert slow.slower_than_declared and "slower than declared" in run.output + _report_text(run)
    # The others share 2 cores with 8 simulators and 8 MTCNN processes, which may hold them near 90% of their rate
    # (the flag's line): the slow one is told apart by its rate, below every other camera's.
    assert all(slow.measured_fps < run.cameras[f"cam-{number}"].measured_fps for number in range(1, 8)), run.cameras
    # Each camera's health reached Prometheus under its own stream label.
    query = 'count(count by (stream) (max_over_time(aitax_camera_frames_total{outcome="received"}[5m]) > 0))'
    answer = requests.get(f"{stack.prometheus_url}/api/v1/query", params={"query": query}, timeout=10).json()
    assert answer["data"]["result"] and float(answer["data"]["result"][0]["value"][1]) >= 8, answer


def _report_text(run: CameraRun) -> str:
    from aitax.reporting.report_render import camera_line

    return "\n".join(camera_line(stream_id, health) for stream_id, health in run.cameras.items())
