"""Tests assert a verdict's named conditions, never that the whole verdict held: `latency bounded` compares a
run's halves, which a shared machine's noise can fail, and is a benchmark's matter (benchmarks/)."""

from __future__ import annotations

from aitax.runs.results import Verdict


def assert_held(verdict: Verdict, *names: str) -> None:
    """Each named condition is in the verdict and held."""
    conditions = {condition.name: condition for condition in verdict.conditions}
    missing = [name for name in names if name not in conditions]
    assert not missing, f"no condition {missing} in {list(conditions)}"
    failed = [f"{c.name}: {c.measured} (required: {c.required})" for name in names
              if not (c := conditions[name]).held]
    assert not failed, failed
