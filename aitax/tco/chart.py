"""Bar chart of yearly TCO by component, one bar group per design (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

from aitax.common.errors import UserError
from aitax.tco.cost import CostBreakdown

COMPONENTS = ("servers", "network", "power", "total")


def draw_cost_chart(breakdowns: list[CostBreakdown], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(breakdowns)
    for index, breakdown in enumerate(breakdowns):
        values = [
            breakdown.yearly_servers_usd / 1e6,
            breakdown.yearly_network_usd / 1e6,
            breakdown.yearly_power_usd / 1e6,
            breakdown.yearly_total_usd / 1e6,
        ]
        positions = [component + index * width for component in range(len(COMPONENTS))]
        bars = axes.bar(positions, values, width, label=breakdown.design)
        axes.bar_label(bars, fmt="%.2f", fontsize=8)
    axes.set_xticks([component + width * (len(breakdowns) - 1) / 2 for component in range(len(COMPONENTS))])
    axes.set_xticklabels(COMPONENTS)
    axes.set_ylabel("US$ million per year")
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120)
    except OSError as error:
        raise UserError(f"{path}: cannot write chart: {error.strerror}") from error
    finally:
        plt.close(figure)
