"""The knee planner against measured knees: one sweep on the fed design, one on each design it predicts (root).

For each design: `aitax stack down`, `aitax stack up --design D`, and the sweep `make emulate-design` runs (90 s of
warm-up, the paper's load scaled with the design: 2 streams at 1x, 60 s per factor). Then `aitax plan-knee` from the fed
design's sweep to every other design, beside that design's measured knee (the first factor past the latency knee,
unstable, or with a resource past 85%). Target: within one factor step on every design not fed.

    .venv/bin/python benchmarks/knee_planner_bench.py [--fed designs/paper.yaml] \
        [--designs designs/paper-2-drives.yaml,designs/paper-hdd.yaml,designs/paper-purpose-built.yaml] \
        [--reuse-fed RESULTS.json] [--out .aitax/knee-bench] [--reuse]

Leaves the last design's stack running. Not a test: the machine is shared, and a run takes about 6 min a design.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

AITAX = [sys.executable, "-m", "aitax.cli"]
SWEEP = ["--factors", "1,2,4,8,16", "--warmup", "90", "--duration", "60", "--producers", "2", "--consumers", "8",
         "--stop-after", "1"]
DEFAULT_DESIGNS = "designs/paper-2-drives.yaml,designs/paper-hdd.yaml,designs/paper-purpose-built.yaml"


def sweep_on(design: Path, out: Path) -> Path:
    results = out / f"{design.stem}.json"
    subprocess.run([*AITAX, "stack", "down"], check=True)
    subprocess.run([*AITAX, "stack", "up", "--design", str(design), "--no-elasticsearch"], check=True)
    with open(out / f"{design.stem}.log", "w") as log:
        subprocess.run([*AITAX, "emulate", *SWEEP, "--out", str(results), "--plots", str(out / design.stem)],
                       check=True, stdout=log, stderr=subprocess.STDOUT)
    print(f"{design}: {results}", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fed", type=Path, default=Path("designs/paper.yaml"))
    parser.add_argument("--designs", default=DEFAULT_DESIGNS)
    parser.add_argument("--reuse-fed", type=Path, help="the fed design's sweep, already measured")
    parser.add_argument("--out", type=Path, default=Path(".aitax/knee-bench"))
    parser.add_argument("--reuse", action="store_true", help="take each sweep already in --out instead of running it")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    designs = [Path(d) for d in args.designs.split(",")]
    def sweep(design: Path) -> Path:
        done = args.out / f"{design.stem}.json"
        return done if args.reuse and done.exists() else sweep_on(design, args.out)

    fed = args.reuse_fed or sweep(args.fed)
    measured = {design: sweep(design) for design in designs}
    for design, results in measured.items():
        print(f"\n== {design} (fed: {args.fed}) ==", flush=True)
        subprocess.run([*AITAX, "plan-knee", "--from-emulation", str(fed), "--design", str(design),
                        "--compare", str(results)], check=True)
    print_table(fed, measured)
    return 0


def print_table(fed: Path, measured: dict[Path, Path]) -> None:
    """The README's table: each design's predicted knees beside its measured one."""
    from aitax.runs.results import SweepResult, read_results
    from aitax.stack.design import load_design
    from aitax.tco.knee import (
        face_costs,
        measured_knee,
        point_seconds,
        predict,
        predicted_knee,
        predicted_sweep_knee,
        read_sweep,
        within_one_step,
    )

    costs = face_costs(read_sweep(fed))
    print(f"\nfed: {fed} (per face, read at {costs.read_at})\n")
    print("| design | steady state: predicted knee | sweep: predicted knee | sweep: measured knee | within a step |")
    print("|---|---|---|---|---|")
    for design_file, results in measured.items():
        design, sweep = load_design(design_file), read_results(results, SweepResult)
        factors = sorted({run.workload.factor for run in sweep.runs} | set(sweep.skipped_factors))
        predictions = predict(costs, design.testbed(), design.brokers, design.broker.drives.count, factors,
                              point_seconds(sweep) if sweep.runs else 60.0)
        steady, in_sweep, actual = predicted_knee(predictions), predicted_sweep_knee(predictions), measured_knee(sweep)
        held = within_one_step(None if in_sweep is None else in_sweep.factor, actual, factors)
        print(f"| {design.name} | {_knee(steady and steady.factor, steady and steady.busiest[0])} | "
              f"{_knee(in_sweep and in_sweep.factor, in_sweep and in_sweep.breaks_point)} | "
              f"{_knee(actual, None)} | {'yes' if held else 'NO'} |")


def _knee(factor: float | None, why: str | None) -> str:
    return "none" if factor is None else f"{factor:g}x" + (f" ({why})" if why else "")


if __name__ == "__main__":
    sys.exit(main())
