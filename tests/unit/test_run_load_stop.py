"""A run's load ended from outside: SIGTERM is Ctrl-C's twin, the load drained and collected, never a bare exit."""

from __future__ import annotations

import os
import signal
import threading
import time

from aitax.runs.results import Workload
from tests.unit.test_cluster_resources import OnePhase


class LongPhase(OnePhase):
    """A minute of load, recording what the engine asked of it after the stop."""

    def __init__(self) -> None:
        super().__init__()
        self.workload = Workload(mode="emulated", producers=1, consumers=1, duration_s=60, drain_s=0)
        self.finished_as: list[bool] = []
        self.drained = 0

    def finish_producers(self, interrupted: bool) -> None:
        self.finished_as.append(interrupted)

    def drain(self, timeout_s: float, on_lag: object) -> int:
        self.drained += 1
        return 0


def test_sigterm_during_the_load_ends_it_early_and_it_is_still_drained_and_collected() -> None:
    from aitax.load.engine import run_load

    load = LongPhase()
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    result = run_load(load)
    assert time.monotonic() - started < 30
    assert result.interrupted and load.finished_as == [True] and load.drained == 1
    assert any("interrupted" in note for note in result.notes), result.notes
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the load's only


class SlowStart(OnePhase):
    """Consumers that take 0.3 s to be ready, producers 0.1 s, and identities before and inside the window."""

    def __init__(self) -> None:
        super().__init__()
        self.workload = Workload(mode="emulated", producers=1, consumers=1, duration_s=0.5, ramp_up_s=0.2, drain_s=0)

    def start_consumers(self) -> None:
        time.sleep(0.3)

    def start_producers(self) -> None:
        time.sleep(0.1)

    def identities(self) -> tuple[list, int]:
        from tests.unit.results_builders import identity

        # scheduled at 0, 100 and 300 ms: the first two in the 200 ms warm-up, slow; the third in the window
        return [identity(0, 900), identity(100, 800), identity(300, 50)], 0


def test_start_up_and_the_warm_up_are_reported_apart_from_the_window() -> None:
    from aitax.load.engine import run_load

    result = run_load(SlowStart())
    startup = result.startup
    assert list(startup.ready_s) == ["emulated consumers", "emulated producers"]
    assert 0.3 <= startup.ready_s["emulated consumers"] < 3 and 0.1 <= startup.ready_s["emulated producers"] < 3
    assert startup.first_result_s == 0.35  # the third face: scheduled at 300 ms, delivered 50 ms later
    assert startup.warmup.faces == 2 and startup.warmup.mean_ms == 850
    assert result.latency.faces == 1 and result.latency.mean_ms == 50  # none of the warm-up in the window
