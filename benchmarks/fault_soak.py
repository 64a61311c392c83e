"""A longer soak than the CI fault tests: the broker, controller and consumer faults again and again, each under
several minutes of emulated load, with every face accounted for each round.

    .venv/bin/python benchmarks/fault_soak.py [--rounds 3] [--minutes 3] [--factor 2]

Prints one row per scenario and round (load, acknowledged, lost, duplicated, producer stall) and a summary:
the worst stall and the total lost (which must be 0). Needs the local stack (`aitax stack up`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds over the scenarios (default 3)")
    parser.add_argument("--minutes", type=float, default=3.0, help="minutes of load per scenario (default 3)")
    parser.add_argument("--factor", type=float, default=2.0, help="acceleration factor of the load (default 2)")
    args = parser.parse_args()

    from aitax.emulation.faults import print_table, run_scenario
    from aitax.stack.stack import current_config, use_local_identity

    config = current_config()
    use_local_identity(None)  # the benchmark is the operator: the admin principal
    if config is None:
        print("needs the local stack: `aitax stack up`", file=sys.stderr)
        return 2
    results = []
    for round_index in range(1, args.rounds + 1):
        for name in ("broker-kill", "controller-kill", "consumer-kill", "two-brokers-down"):
            print(f"round {round_index}/{args.rounds}: {name}", flush=True)
            results.append(run_scenario(name, config, factor=args.factor, duration_s=args.minutes * 60))
    print_table(results)
    lost = sum(r.lost for r in results)
    worst = max(results, key=lambda r: r.stall_s)
    print(f"\n{len(results)} faults over {args.rounds} rounds: {lost} faces lost, "
          f"{sum(r.duplicates for r in results)} duplicates removed, worst producer stall {worst.stall_s:.1f} s "
          f"({worst.scenario}); target <= 5 s for one broker")
    return 0 if lost == 0 and all(r.verdict.held for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
