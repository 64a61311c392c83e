"""What securing Kafka costs: the sweep users run at a factor where every emulated sleep vanishes, on a plaintext
stack and on the default one (mutual TLS on every listener, ACLs), side by side in one run.

    .venv/bin/python benchmarks/security_bench.py [--seconds 20] [--instances 16] [--processes 2] [--repeat 2]

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
    """The local stack, restarted with or without TLS; this process connects as its operator."""
    from stack.stack import running_config, use_local_kafka_identity

    aitax = [sys.executable, "-m", "aitax.cli", "stack"]
    subprocess.run([*aitax, "down"], check=True, capture_output=True)
    subprocess.run([*aitax, "up", "--no-elasticsearch", *([] if tls else ["--plaintext"])], check=True,
                   capture_output=True)
    use_local_kafka_identity(None)
    return running_config()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of load per run (default 20)")
    parser.add_argument("--instances", type=int, default=16, help="emulated instances a side (default 16)")
    parser.add_argument("--processes", type=int, default=2, help="OS processes a side (default 2)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each side, alternating (default 2)")
    args = parser.parse_args()

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
