"""What securing Kafka costs: the sweep users run at a factor where every emulated sleep vanishes, on a plaintext
stack and on the default one (mutual TLS on every listener, ACLs), side by side in one run. With --demo: `aitax
demo` (the real pipeline on the hard video) on each, its end-to-end and broker-wait latency side by side.

    .venv/bin/python benchmarks/security_bench.py [--seconds 20] [--instances 16] [--processes 2] [--repeat 2]
    .venv/bin/python benchmarks/security_bench.py --demo [--repeat 1]

The stack is restarted for each side (plaintext, TLS, plaintext, TLS, ...: alternating, so drift on a shared
machine falls on both), without Elasticsearch; it is left running with TLS, as `aitax stack up` starts it. Prints
identified faces/s, CPU per face (brokers; each emulator side) and what saturated, and the secured/plaintext
ratios of throughput and of CPU per face (target: throughput >= 0.85x). Not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SIDES = ("plaintext", "tls")


def restart_stack(tls: bool) -> object:
    """The local stack, restarted with or without TLS (Kafka; Elasticsearch is left out: neither measure uses it);
    this process connects as its operator."""
    from aitax.stack.stack import running_config, use_local_identity

    aitax = [sys.executable, "-m", "aitax.cli", "stack"]
    subprocess.run([*aitax, "down"], check=True, capture_output=True)
    subprocess.run([*aitax, "up", "--no-elasticsearch", *([] if tls else ["--plaintext"])], check=True,
                   capture_output=True)
    use_local_identity(None)
    return running_config()


DEMO_ROWS = ("broker_wait", "identify", "end_to_end")  # `aitax demo`'s latency rows compared


def demo_latency(out: Path) -> dict[str, tuple[float, float]]:
    """`aitax demo` into `out`; (p50, p99) ms of each of DEMO_ROWS from its printed breakdown."""
    shown = subprocess.run([sys.executable, "-m", "aitax.cli", "demo", "--out", str(out)], capture_output=True,
                           text=True, check=True).stdout
    rows = {}
    for line in shown.splitlines():
        fields = line.split()
        if fields and fields[0] in DEMO_ROWS and len(fields) >= 4:
            rows[fields[0]] = (float(fields[2]), float(fields[3]))
    missing = set(DEMO_ROWS) - rows.keys()
    if missing:
        raise SystemExit(f"aitax demo printed no {', '.join(sorted(missing))} row: {shown[-500:]}")
    return rows


def compare_demo(repeat: int) -> int:
    import tempfile

    from tqdm import tqdm

    measured: dict[str, list[dict]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as scratch:
        for side in tqdm([side for _ in range(repeat) for side in SIDES], desc="plaintext / TLS demos", unit="demo"):
            restart_stack(tls=side == "tls")
            measured[side].append(demo_latency(Path(scratch) / side))
            tqdm.write(f"   {side:<9} " + "; ".join(f"{row} p50 {p50:.0f} ms p99 {p99:.0f} ms"
                                                    for row, (p50, p99) in measured[side][-1].items()))
    print(f"\n`aitax demo` (1 ingest-detect, 2 identify, 60 s of the hard video), median of {repeat}:")
    median = {side: {row: tuple(statistics.median(run[row][q] for run in runs) for q in (0, 1)) for row in DEMO_ROWS}
              for side, runs in measured.items()}
    for row in DEMO_ROWS:
        plain, secured = median["plaintext"][row], median["tls"][row]
        print(f"   {row:<12} p50 {plain[0]:6.1f} -> {secured[0]:6.1f} ms (TLS/plaintext "
              f"{secured[0] / max(1e-9, plain[0]):.2f}); p99 {plain[1]:6.1f} -> {secured[1]:6.1f} ms")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of load per run (default 20)")
    parser.add_argument("--instances", type=int, default=16, help="emulated instances a side (default 16)")
    parser.add_argument("--processes", type=int, default=2, help="OS processes a side (default 2)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each side, alternating (default 2)")
    parser.add_argument("--demo", action="store_true", help="compare `aitax demo`'s latency instead")
    args = parser.parse_args()
    if args.demo:
        return compare_demo(args.repeat)

    from emulator_bench import NO_SLEEP, sweep_point
    from tqdm import tqdm

    measured: dict[str, list[dict]] = {side: [] for side in SIDES}
    runs = [side for _ in range(args.repeat) for side in SIDES]
    for side in tqdm(runs, desc="plaintext / TLS runs", unit="run"):
        config = restart_stack(tls=side == "tls")
        sweep_point(config, 8, 4, 1, "face")  # warm-up: fresh brokers' JIT
        point = sweep_point(config, args.seconds, args.instances, args.processes, "face")
        measured[side].append(point)
        cpu = ", ".join(f"{role} {us:.0f}" for role, us in point["cpu_us"].items())
        tqdm.write(f"   {side:<9} {point['rate']:6.0f} faces/s; cpu us/face: {cpu}; {point['saturated']}")

    print(f"\n`aitax emulate --factors {NO_SLEEP:g}`, {args.instances} instances a side in {args.processes} "
          f"process(es), keyed by face, {args.seconds:g} s; median of {args.repeat}:")
    median = {side: {"rate": statistics.median(p["rate"] for p in points),
                     "cpu_us": {role: statistics.median(p["cpu_us"][role] for p in points)
                                for role in points[0]["cpu_us"]}}
              for side, points in measured.items()}
    for side, values in median.items():
        cpu = ", ".join(f"{role} {us:.0f}" for role, us in values["cpu_us"].items())
        print(f"   {side:<9} {values['rate']:6.0f} faces/s; cpu us/face: {cpu}")
    plain, secured = median["plaintext"], median["tls"]
    print(f"   RATIO throughput TLS/plaintext: {secured['rate'] / max(1.0, plain['rate']):.2f} (target >= 0.85)")
    for role, us in secured["cpu_us"].items():
        print(f"   RATIO cpu per face TLS/plaintext, {role}: {us / max(1e-9, plain['cpu_us'][role]):.2f}")
    total = {side: sum(values["cpu_us"].values()) for side, values in median.items()}
    print(f"   RATIO cpu per face TLS/plaintext, all: {total['tls'] / max(1e-9, total['plaintext']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
