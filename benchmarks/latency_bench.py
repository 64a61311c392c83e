"""Latency against load in one run, side by side: what the dynamic batcher's delay and the results linger cost, on
the real pipeline and on the emulator, so the trade-off is measured rather than assumed.

    .venv/bin/python benchmarks/latency_bench.py [--seconds 40] [--streams 1,2,4] [--delays 0,2,10]
        [--factors 1,2,4,8,16,32] [--no-before] [--out .aitax/latency-bench.json]

Real pipeline: the demo's gallery and hard video (made under .aitax/demo when missing), one ingest-detect process
per stream and 2 identify processes, at each maximum queue delay, with confluent-kafka; then 1 stream through
kafka-python. Emulator: the paper's profile with `make emulate-accel`'s 4 streams, 8 identify instances and 2
processes a side, factor after factor until the first that does not hold its verdict (past saturation nothing new
is learnt), at each delay.
Unless --no-before, the settings this platform had before the dynamic batcher also run, on the same machine in the
same run: identify waited up to 500 ms for 8 faces and results lingered 100 ms (timed here to the durable result,
as every row is).

One row per point: offered and achieved faces/s, end to end p50 and p99 (schedule to the identity's append), broker
wait p50 and the owner of most of it, the batch size of the median face, and whether the run's verdict held. Not a
test: this machine is shared and noisy; compare rows of one run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BEFORE = {"max_queue_delay_ms": 500.0, "results_linger_ms": 100.0}  # identify_loop's poll and linger until issue 31
HEADER = (f"{'point':<34}{'offered/s':>10}{'faces/s':>9}{'e2e p50':>9}{'e2e p99':>9}{'wait p50':>10}"
          f"{'  most of the wait':<20}{'batch p50':>10}  verdict")


def _numbers(text: str, kind=float) -> list:
    try:
        return [kind(value) for value in text.split(",") if value.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers separated by commas") from None


def row(label: str, result) -> str:
    from aitax.telemetry.latency import batch_size_p50, dominant_wait

    latency = result.latency
    offered = "-" if result.offered_faces_per_s is None else f"{result.offered_faces_per_s:.1f}"
    if latency is None:
        return f"{label:<34}{offered:>10}{result.achieved_faces_per_s:>9.1f}  no faces identified"
    owner = dominant_wait(latency.breakdown_ms)
    return (f"{label:<34}{offered:>10}{result.achieved_faces_per_s:>9.1f}{latency.p50_ms:>9.0f}{latency.p99_ms:>9.0f}"
            f"{latency.broker_wait_p50_ms:>10.1f}  {owner + f' {latency.breakdown_ms[owner]:.0f} ms':<18}"
            f"{batch_size_p50(latency.batch_sizes) or 0:>10g}  {'held' if result.stable else 'FAILED'}")


def real_points(args, bootstrap: str) -> list[tuple[str, object]]:
    from aitax.load.engine import REAL_DRAIN_S, run_local_pipeline
    from aitax.pipeline.inputs import demo_inputs
    from aitax.runs.results import Driver, Workload

    gallery, video = demo_inputs()
    points = [(f"real {n} stream(s), delay {delay:g} ms", n, Driver(max_queue_delay_ms=delay))
              for n in args.streams for delay in args.delays]
    points.append(("real 1 stream, kafka-python", 1, Driver(kafka_client="kafka-python")))
    if args.before:
        points.insert(0, ("real 1 stream, BEFORE (500 ms, 100 ms)", 1, Driver(**BEFORE)))
    results = []
    for label, streams, driver in points:
        workload = Workload(mode="real", producers=streams, consumers=2, duration_s=args.seconds, video=str(video),
                            gallery=str(gallery), drain_s=REAL_DRAIN_S, ramp_up_s=5.0)
        result = run_local_pipeline(workload, driver, None, bootstrap)
        print(row(label, result), flush=True)
        results.append((label, result))
    return results


def emulated_points(args, config) -> list[tuple[str, object]]:
    from aitax.common.errors import UserError
    from aitax.emulation.profile import load_profile
    from aitax.emulation.sweep import SweepPlan, SweepSpec, emulated_workload, run_sweep
    from aitax.runs.results import Driver

    settings = [(f"delay {delay:g} ms", Driver(max_queue_delay_ms=delay)) for delay in args.delays]
    if args.before:
        settings.insert(0, ("BEFORE (results linger 100 ms)", Driver(**BEFORE)))  # its batch was 1 then too
    results = []
    for name, driver in settings:
        for index, factor in enumerate(args.factors):
            # `make emulate-accel`'s shape: 4 streams, 8 identify instances, 2 processes a side, cold brokers warmed
            spec = SweepSpec(SweepPlan([factor], warmup_s=0.0 if index else 15.0),
                             emulated_workload(4, 8, 2, args.emulated_seconds, "paper"), driver, load_profile("paper"))
            label = f"emulated {factor:g}x, {name}"
            try:
                [run] = run_sweep(spec, config, progress=lambda _: None).runs
            except UserError as error:  # far past saturation the emulator may still fail (issue 33)
                print(f"{label:<34}failed: {error}", flush=True)
                break
            print(row(label, run), flush=True)
            results.append((label, run))
            if not run.stable:
                break  # past saturation: the next factors only fail harder
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0, help="ingestion per real run (default 40)")
    parser.add_argument("--emulated-seconds", type=float, default=20.0, help="load per emulated run (default 20)")
    parser.add_argument("--streams", type=lambda t: _numbers(t, int), default=[1, 2, 4],
                        help="real streams (default 1,2,4)")
    parser.add_argument("--delays", type=_numbers, default=[0.0, 2.0, 10.0],
                        help="maximum queue delays in ms (default 0,2,10)")
    parser.add_argument("--factors", type=_numbers, default=[1, 2, 4, 8, 16, 32],
                        help="emulated acceleration factors, run up to the first that fails (default 1,2,4,8,16,32)")
    parser.add_argument("--no-before", dest="before", action="store_false",
                        help="leave out the settings before the dynamic batcher")
    parser.add_argument("--skip", choices=("real", "emulated"), help="leave out one side")
    parser.add_argument("--out", type=Path, help="write every RunResult here (JSON lines)")
    args = parser.parse_args()

    from aitax.stack.stack import running_config, use_local_identity

    config = running_config()
    use_local_identity(None)  # the benchmark is the operator: the admin principal
    print(HEADER, flush=True)
    results = []
    if args.skip != "real":
        results += real_points(args, config.bootstrap_servers)
    if args.skip != "emulated":
        # The emulator's identify takes one face at a time (the paper's profile is per face): its batch is 1.
        results += emulated_points(args, config)
    print("\n" + HEADER)
    for label, result in results:
        print(row(label, result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(f'{{"point": "{label}", "result": {result.model_dump_json()}}}\n'
                                    for label, result in results))
        print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
