"""Two- against three-stage Face Recognition, side by side (the paper's Sec. 3.3, Fig. 3): what sending every
frame through Kafka costs the brokers, the network and a face's latency. The paper chose two stages to spare the
network and publishes no figure for it; this measures the choice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aitax.runs.results import RunResult
from aitax.telemetry.latency import broker_wait_ms

MB = 1e6


@dataclass(frozen=True)
class Measure:
    label: str
    value: Callable[[RunResult], float | None]
    unit_format: str = "{:,.1f}"


def _breakdown(stage: str) -> Callable[[RunResult], float | None]:
    return lambda run: None if run.latency is None else run.latency.breakdown_ms.get(stage, 0.0)


MEASURES = (
    Measure("faces identified", lambda run: float(run.identified_faces), "{:,.0f}"),
    Measure("end to end mean (ms)", lambda run: None if run.latency is None else run.latency.mean_ms),
    Measure("end to end p99 (ms)", lambda run: None if run.latency is None else run.latency.p99_ms),
    Measure("frame queue: ingest -> detect (ms)", _breakdown("frame_queue")),
    Measure("broker wait: detect -> identify (ms)",
            lambda run: None if run.latency is None else broker_wait_ms(run.latency.breakdown_ms)),
    Measure("broker disk writes per broker (MB/s)",
            lambda run: None if run.resources is None else run.resources.broker_disk_write_bytes_per_s / MB),
    Measure("network, loopback (MB/s)",
            lambda run: None if run.resources is None else run.resources.loopback_bytes_per_s / MB),
    Measure("broker CPU, all brokers (cores)",
            lambda run: None if run.resources is None else sum(run.resources.broker_cpu_cores.values()), "{:.2f}"),
    Measure("machine CPU busy", lambda run: None if run.resources is None else run.resources.machine_cpu_busy,
            "{:.0%}"),
)


def format_comparison(two: RunResult, three: RunResult) -> list[str]:
    lines = [f"{'':<40}{'two stages':>12}{'three stages':>14}{'three / two':>13}"]
    for measure in MEASURES:
        a, b = measure.value(two), measure.value(three)
        ratio = f"{b / a:.2f}x" if a and b is not None else "-"
        lines.append(f"{measure.label:<40}{'-' if a is None else measure.unit_format.format(a):>12}"
                     f"{'-' if b is None else measure.unit_format.format(b):>14}{ratio:>13}")
    lines.append(f"runs: {two.run_id} (two stages), {three.run_id} (three stages). The paper (Sec. 3.3) chose two "
                 "stages to spare the network and publishes no figure for it.")
    return lines


def plot_comparison(two: RunResult, three: RunResult, path: Path) -> Path:
    """Each measure of the three-stage run relative to the two-stage one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(m.label, m.value(two), m.value(three)) for m in MEASURES[1:]]
    rows = [(label, b / a) for label, a, b in rows if a and b is not None]
    figure, axis = plt.subplots(figsize=(7, 4))
    axis.barh([label for label, _ in rows], [ratio for _, ratio in rows], color="tab:orange")
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set(title="Three-stage design relative to two stages (Fig. 3)", xlabel="three stages / two stages")
    axis.invert_yaxis()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
