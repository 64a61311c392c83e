"""The emulator's compute model checked against the real pipeline, side by side in one run.

    .venv/bin/python benchmarks/accelerator_bench.py [--streams 1,2,4] [--seconds 40] [--consumers 2]

1. Calibrate this CPU's identify curve (`aitax calibrate identify`: thumbnail decode + FaceNet per batch).
2. Run the real pipeline (ingest-detect + identify processes, the demo's hard video and gallery) at each stream
   count; derive an emulation profile from the first run's events (detect and ingest times, faces per frame,
   thumbnail sizes).
3. Run the emulator with that profile and the calibrated curve in place of identify's per-face times, the same
   streams, consumers and batching (identify's batch of at most 8), at each stream count. Its compute takes the
   measured time as CPU time on this host (`--compute cpu`; the curve says `host_cpu`), as the real stages do, and
   its streams replay the faces each frame of the video held (the profile's sequence): every real stream plays the
   same video from its first frame, so their faces come in the same bursts.
4. Print faces/s, identify batch p50 and end-to-end p50/p99 of both, and the emulator's error on each, then a
   verdict per condition and load (the targets: within 10% on throughput, 20% on p50).
Not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

IDENTIFY_MAX_BATCH = 8  # the real identify's default (pipeline.transport.batcher.DEFAULT_BATCHING)
# The targets for the emulator's prediction, per load
THROUGHPUT_TOLERANCE = 0.10
P50_TOLERANCE = 0.20


def real_run(config, video: Path, gallery: Path, streams: int, consumers: int, seconds: float, folder: Path):
    from aitax.load.engine import run_load
    from aitax.load.local import LocalLoad
    from aitax.pipeline.runtime import new_run_id
    from aitax.runs.results import Driver, Workload

    run_id = new_run_id()
    workload = Workload(mode="real", producers=streams, consumers=consumers, duration_s=seconds, video=str(video),
                        gallery=str(gallery), ramp_up_s=5.0, drain_s=120.0)
    events = folder / run_id
    load = LocalLoad(workload, Driver(), run_id, config.bootstrap_servers, events / "logs", f"file:{events}")
    load.check()
    return run_load(load, stack=config), events


def emulated_run(config, profile, profile_path: Path, curve: Path, streams: int, consumers: int, seconds: float):
    from aitax.emulation.sweep import SweepPlan, SweepSpec, emulated_workload, run_sweep
    from aitax.runs.results import Driver

    # OS processes as the real run has them, as far as one count serves both sides: the GIL of one process holding
    # every stream would slow the emulated producers where the real ones are processes of their own
    load = emulated_workload(streams, consumers, max(1, min(streams, consumers)), seconds, str(profile_path),
                             ramp_up_s=5.0, accelerators=[str(curve)], compute="cpu")
    spec = SweepSpec(SweepPlan([1.0], stop_after=0), load, Driver(max_batch=IDENTIFY_MAX_BATCH), profile)
    return run_sweep(spec, config, progress=lambda _: None).runs[0]


def _summary(run) -> tuple[float, float, float, float]:
    from aitax.telemetry.latency import batch_size_p50

    latency = run.latency
    if latency is None:
        return run.achieved_faces_per_s, 0.0, float("nan"), float("nan")
    return (run.achieved_faces_per_s, batch_size_p50(latency.batch_sizes) or 0.0, latency.p50_ms,
            latency.p99_ms)


def _cores(run) -> str:
    """Where the window's CPU went: the load's producers and consumers and the brokers, in cores."""
    used = run.resources
    clients = "/".join(f"{cores:.2f}" for cores in used.client_cpu_cores.values())
    return f"{clients} + brokers {sum(used.broker_cpu_cores.values()):.2f} ({used.machine_cpu_busy:.0%} busy)"


def _within(emulated: float, real: float, tolerance: float) -> bool:
    return bool(real) and abs(emulated - real) / real <= tolerance


def _error(emulated: float, real: float) -> str:
    return f"{(emulated - real) / real:+.0%}" if real else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=lambda text: [int(v) for v in text.split(",")], default=[1, 2, 4],
                        help="stream counts (default 1,2,4); the first one's events give the profile")
    parser.add_argument("--seconds", type=float, default=40.0, help="seconds of load per run (default 40)")
    parser.add_argument("--consumers", type=int, default=2, help="identify processes / instances (default 2)")
    parser.add_argument("--video", type=Path, default=Path(".aitax/demo/video.mp4"),
                        help="the hard video (default: the demo's, `make demo` makes it)")
    parser.add_argument("--gallery", type=Path, default=Path(".aitax/demo/gallery.npz"),
                        help="the enrolled gallery (default: the demo's)")
    args = parser.parse_args()

    from aitax.common.errors import UserError
    from aitax.emulation.calibrate import calibrate_identify
    from aitax.emulation.curves import load_curve
    from aitax.emulation.profile import derive_profile
    from aitax.stack.stack import running_config, use_local_identity
    from aitax.telemetry.event_sources import load_events

    for path in (args.video, args.gallery):
        if not path.is_file():
            raise UserError(f"{path}: missing (`make demo` makes the demo's video and gallery)")
    config = running_config()
    use_local_identity(None)  # the benchmark is the operator: the admin principal
    with tempfile.TemporaryDirectory(prefix="aitax-accelerator-bench-") as scratch:
        folder = Path(scratch)
        print("1. calibrating this CPU's identify curve ...", flush=True)
        curve_path = calibrate_identify(folder / "cpu.yaml", "openvino", "auto", 1, (1, 2, 4, 8), 5)
        curve = load_curve(str(curve_path))
        print("   " + ", ".join(f"batch {n}: {ms:.1f} ms" for n, ms in curve.points), flush=True)
        rows, cpu, parts, profile, profile_path = [], [], [], None, folder / "profile.yaml"
        for streams in args.streams:
            started = time.monotonic()
            real, events = real_run(config, args.video, args.gallery, streams, args.consumers, args.seconds, folder)
            if profile is None:
                profile = derive_profile(load_events(real.run_id, events).documents, f"bench-{real.run_id}")
                profile_path.write_text(profile.to_yaml())
                print(f"2. profile from the {streams}-stream real run: detect "
                      f"{profile.compute_ms['detect'].mean():.1f} ms, {profile.mean_faces_per_frame():.2f} faces "
                      f"per frame, thumbnails {profile.thumbnail_bytes.mean():,.0f} bytes", flush=True)
            emulated = emulated_run(config, profile, profile_path, curve_path, streams, args.consumers,
                                    args.seconds)
            rows.append((streams, _summary(real), _summary(emulated)))
            cpu.append((streams, _cores(real), _cores(emulated)))
            parts.append((streams, real.latency, emulated.latency))
            print(f"   {streams} stream(s) measured in {time.monotonic() - started:.0f} s", flush=True)
    print(f"\n3. real pipeline vs emulator ({args.consumers} identify, batches of at most {IDENTIFY_MAX_BATCH}, "
          f"{args.seconds:g} s, the first 5 s left out)")
    print(f"{'streams':>7} {'faces/s real/emu':>18} {'err':>6} {'batch p50':>10} {'p50 ms real/emu':>17} {'err':>6} "
          f"{'p99 ms real/emu':>17} {'err':>6}")
    for streams, (rate, batch, p50, p99), (emu_rate, emu_batch, emu_p50, emu_p99) in rows:
        print(f"{streams:>7} {rate:>8.1f} /{emu_rate:>7.1f} {_error(emu_rate, rate):>6} {batch:>4g} /{emu_batch:>4g} "
              f"{p50:>8.0f} /{emu_p50:>6.0f} {_error(emu_p50, p50):>6} {p99:>8.0f} /{emu_p99:>6.0f} "
              f"{_error(emu_p99, p99):>6}")
    print("\nverdict (each condition, each load):")
    for streams, (rate, _, p50, _), (emu_rate, _, emu_p50, _) in rows:
        for name, held, tolerance in (
                ("throughput", _within(emu_rate, rate, THROUGHPUT_TOLERANCE), THROUGHPUT_TOLERANCE),
                ("end-to-end p50", _within(emu_p50, p50, P50_TOLERANCE), P50_TOLERANCE)):
            print(f"  {streams} stream(s) {name} within {tolerance:.0%}: {'held' if held else 'NOT HELD'}")
    print("\nCPU in the window, cores (producers/consumers + brokers)")
    for streams, real_cores, emulated_cores in cpu:
        print(f"{streams:>7}  real {real_cores}   emulated {emulated_cores}")
    print("\nWhere end to end went, mean ms per part, real/emulated")
    for streams, real_latency, emulated_latency in parts:
        if real_latency and emulated_latency:
            print(f"{streams:>7}  " + ", ".join(f"{name} {ms:.0f}/{emulated_latency.breakdown_ms.get(name, 0):.0f}"
                                                for name, ms in real_latency.breakdown_ms.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
