"""A run's load ended from outside: SIGTERM is Ctrl-C's twin, the load drained and collected, never a bare exit."""

from __future__ import annotations

import os
import signal
import threading
import time

from telemetry.results import Workload
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
    from load.engine import run_load

    load = LongPhase()
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    result = run_load(load)
    assert time.monotonic() - started < 30
    assert result.interrupted and load.finished_as == [True] and load.drained == 1
    assert any("interrupted" in note for note in result.notes), result.notes
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the load's only
