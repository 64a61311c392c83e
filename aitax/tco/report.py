"""Text tables and JSON documents for the `aitax tco` and `aitax plan` commands."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from typing import Any

from aitax.tco.capacity import (
    FIG15_FACTORS,
    Calibration,
    Fig15Comparison,
    faces_per_stream_at_1x,
    nominal_write_utilisation_at_1x,
    throughput_speedup,
)
from aitax.tco.catalog import Catalog
from aitax.tco.cost import NETWORK, SERVERS, Check, CostBreakdown
from aitax.tco.planner import DesignPlan, Plan


def money(usd: float) -> str:
    return f"-${-usd:,.0f}" if usd < 0 else f"${usd:,.0f}"


def table(rows: list[list[str]], left: tuple[int, ...] = (0,)) -> str:
    """Rows of cells as aligned text: the columns in `left` left-aligned (text), the others right-aligned."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.ljust(width) if column in left else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def format_design(catalog: Catalog, breakdown: CostBreakdown, checks: list[Check]) -> str:
    design = catalog.designs[breakdown.design]
    rows = [["item", "group", "unit price", "per node", "quantity", "total"]]
    rows += [
        [
            line.item.name,
            line.group,
            money(line.item.price_usd),
            "" if line.per_node is None else str(line.per_node),
            f"{line.quantity:,}",
            money(line.total_usd),
        ]
        for line in breakdown.lines
    ]
    rows.append(["equipment total", "", "", "", "", money(breakdown.equipment_usd())])
    parts = [
        f"{design.name}: {design.description} (catalog {catalog.name})",
        "",
        table(rows, left=(0, 1)),
        "",
        format_yearly(breakdown),
    ]
    if checks:
        parts += ["", format_checks(checks)]
    return "\n".join(parts)


def format_yearly(breakdown: CostBreakdown) -> str:
    parameters = breakdown.parameters
    years = parameters.amortisation_years
    rows = [
        [
            "servers/yr",
            money(breakdown.yearly_servers_usd),
            f"({money(breakdown.equipment_usd(SERVERS))} node equipment + {breakdown.racks} racks x"
            f" {money(parameters.rack_usd)}) / {years} years",
        ],
        [
            "network/yr",
            money(breakdown.yearly_network_usd),
            f"({money(breakdown.equipment_usd(NETWORK))} network equipment +"
            f" {parameters.network_overhead_fraction:.0%} cabling/install) / {years} years",
        ],
        [
            "power/yr",
            money(breakdown.yearly_power_usd),
            f"{breakdown.it_watts / 1000:,.1f} kW x {1 + parameters.cooling_overhead:.2f} (cooling) x"
            f" {parameters.hours_per_year:,} h x ${parameters.electricity_usd_per_kwh:.2f}/kWh"
            f" (all at rated power: {breakdown.full_load_it_watts / 1000:,.1f} kW)",
        ],
        ["total/yr", money(breakdown.yearly_total_usd), ""],
    ]
    return "yearly cost\n" + _indent(table(rows, left=(0, 2)))


def format_checks(checks: list[Check]) -> str:
    rows = [["paper check", "ours", "paper", ""]]
    rows += [
        [check.label, check.ours, check.paper, "match" if check.matches else "MISMATCH"] for check in checks
    ]
    return table(rows, left=(0, 3))


def format_comparison(
    catalog: Catalog, baseline: CostBreakdown, other: CostBreakdown, saving: float, checks: list[Check]
) -> str:
    def row(label: str, ours: float, theirs: float) -> list[str]:
        change = theirs - ours
        return [label, money(ours), money(theirs), f"{money(change)} ({change / ours:+.1%})" if ours else ""]

    rows = [
        ["", baseline.design, other.design, "difference"],
        row("equipment", baseline.equipment_usd(), other.equipment_usd()),
        row("servers/yr", baseline.yearly_servers_usd, other.yearly_servers_usd),
        row("network/yr", baseline.yearly_network_usd, other.yearly_network_usd),
        row("power/yr", baseline.yearly_power_usd, other.yearly_power_usd),
        row("total/yr", baseline.yearly_total_usd, other.yearly_total_usd),
    ]
    parts = [
        f"TCO comparison (catalog {catalog.name},"
        f" {baseline.parameters.amortisation_years}-year amortisation)",
        "",
        table(rows),
        "",
        f"{other.design} TCO is {saving:.2f}% lower than {baseline.design}",
    ]
    if checks:
        parts += ["", format_checks(checks)]
    if catalog.notes:
        parts += ["", "notes on the paper"] + [_bullet(note) for note in catalog.notes]
    return "\n".join(parts)


def format_capacity(calibration: Calibration, comparisons: list[Fig15Comparison]) -> str:
    parameters = calibration.parameters
    speedups = ", ".join(
        f"s({factor})={throughput_speedup(factor, parameters):.2f}" for factor in FIG15_FACTORS
    )
    header = [
        f"capacity model calibrated on {calibration.note}",
        f"  1x: {faces_per_stream_at_1x(parameters):.2f} faces/s per stream; the paper's nominal"
        f" {parameters.nominal_fps_per_stream:g} FPS would write"
        f" {nominal_write_utilisation_at_1x(parameters):.1%} of a drive, not the measured"
        f" {parameters.write_utilisation_at_1x:.1%}",
        f"  throughput speedup {speedups}",
        f"  stable while broker writes stay below {parameters.utilisation_ceiling:.0%} of"
        f" {parameters.drive_write_bytes_per_s / 1e9:g} GB/s per drive; an extra drive in a broker adds"
        f" {parameters.extra_drive_efficiency:.3f} of a drive",
    ]
    rows = [
        ["series", "config", "limit"] + [f"{factor}x" for factor in FIG15_FACTORS] + ["paper says", "result"]
    ]
    for comparison in comparisons:
        row = comparison.row
        config = f"{row.brokers}B x {row.drives_per_broker}D"
        if row.face_fraction != 1:
            config += f" face 1/{round(1 / row.face_fraction)}"
        cells = [_cell(cell.model_stable, cell.paper_stable) for cell in comparison.cells]
        limit = "unbounded" if math.isinf(comparison.model_limit) else f"{comparison.model_limit:.2f}x"
        rows.append(
            [row.series, config, limit, *cells, row.paper_says, "match" if comparison.matches else "MISMATCH"]
        )
    reported = [cell for comparison in comparisons for cell in comparison.cells if cell.matches is not None]
    matched_rows = sum(comparison.matches for comparison in comparisons)
    summary = (
        f"{matched_rows} of {len(comparisons)} rows match; {sum(bool(cell.matches) for cell in reported)} of"
        f" {len(reported)} reported cells match (model/paper: S stable, U unstable, - not reported)"
    )
    mismatches = [
        _bullet(
            f"{comparison.row.series} {comparison.row.brokers}B x {comparison.row.drives_per_broker}D:"
            f" {comparison.explanation}"
        )
        for comparison in comparisons
        if not comparison.matches
    ]
    text_columns = (0, 1, len(rows[0]) - 2, len(rows[0]) - 1)
    parts = ["\n".join(header), "", "Fig. 15 comparison", table(rows, left=text_columns), "", summary]
    if mismatches:
        parts += ["mismatches", *mismatches]
    return "\n".join(parts)


def _cell(model_stable: bool, paper_stable: bool | None) -> str:
    paper = "-" if paper_stable is None else "S" if paper_stable else "U"
    return f"{'S' if model_stable else 'U'}/{paper}"


def format_plan(result: Plan) -> str:
    designs = (result.homogeneous, result.purpose_built)

    def row(label: str, value: Callable[[DesignPlan], str]) -> list[str]:
        return [label, *(value(design) for design in designs)]

    rows = [
        ["", *(design.design.name for design in designs)],
        row("producer nodes", lambda d: f"{d.producer_nodes:,}"),
        row("consumer nodes", lambda d: f"{d.consumer_nodes:,}"),
        row("broker nodes", lambda d: f"{d.broker_nodes:,}"),
        row("drives per broker", lambda d: str(d.drives_per_broker)),
        row("drives in total", lambda d: f"{d.drives:,}"),
        row("broker drive utilisation", lambda d: f"{d.broker_drive_utilisation:.1%}"),
        row("NIC compute / broker", lambda d: f"{d.compute_nic_gbps:g} / {d.broker_nic_gbps:g} GbE"),
        row("traffic producer node", lambda d: f"{d.producer_node_gbps:.2f} Gbps"),
        row("traffic consumer node", lambda d: f"{d.consumer_node_gbps:.2f} Gbps"),
        row("traffic broker node", lambda d: f"{d.broker_node_gbps:.2f} Gbps"),
        row("switches / ports", lambda d: f"{d.switches:,} / {d.switch_ports:,}"),
        row("equipment", lambda d: money(d.cost.equipment_usd())),
        row("servers/yr", lambda d: money(d.cost.yearly_servers_usd)),
        row("network/yr", lambda d: money(d.cost.yearly_network_usd)),
        row("power/yr", lambda d: money(d.cost.yearly_power_usd)),
        row("total/yr", lambda d: money(d.cost.yearly_total_usd)),
    ]
    parts = [
        f"plan: {result.accel:g}x AI acceleration, {result.streams:,} streams, headroom {result.headroom:g}x",
        f"  calibrated on {result.calibration_note}",
        f"  throughput speedup {result.throughput_speedup:.2f}; broker writes"
        f" {result.disk_write_bytes_per_s / 1e9:.2f} GB/s in all",
        "",
        table(rows),
        "",
        f"purpose-built TCO is {result.saving_percent:.1f}% lower",
    ]
    warnings = [
        _bullet(f"{design.design.name}: {warning}") for design in designs for warning in design.warnings
    ]
    if warnings:
        parts += ["warnings", *warnings]
    return "\n".join(parts)


def breakdown_json(breakdown: CostBreakdown) -> dict[str, Any]:
    return {
        "design": breakdown.design,
        "lines": [
            {
                "item": line.item.id,
                "name": line.item.name,
                "group": line.group,
                "category": line.category,
                "unit_price_usd": line.item.price_usd,
                "quantity": line.quantity,
                "total_usd": line.total_usd,
            }
            for line in breakdown.lines
        ],
        "equipment_usd": breakdown.equipment_usd(),
        "racks": breakdown.racks,
        "it_watts": breakdown.it_watts,
        "yearly_servers_usd": breakdown.yearly_servers_usd,
        "yearly_network_usd": breakdown.yearly_network_usd,
        "yearly_power_usd": breakdown.yearly_power_usd,
        "yearly_total_usd": breakdown.yearly_total_usd,
    }


def checks_json(checks: list[Check]) -> list[dict[str, Any]]:
    return [{"label": c.label, "ours": c.ours, "paper": c.paper, "matches": c.matches} for c in checks]


def capacity_json(calibration: Calibration, comparisons: list[Fig15Comparison]) -> dict[str, Any]:
    return {
        "calibration": calibration.note,
        "rows": [
            {
                "series": comparison.row.series,
                "brokers": comparison.row.brokers,
                "drives_per_broker": comparison.row.drives_per_broker,
                "face_fraction": comparison.row.face_fraction,
                "model_limit": None if math.isinf(comparison.model_limit) else comparison.model_limit,
                "paper_says": comparison.row.paper_says,
                "matches": comparison.matches,
                "explanation": comparison.explanation,
                "cells": [
                    {
                        "factor": cell.factor,
                        "utilisation": cell.utilisation,
                        "model_stable": cell.model_stable,
                        "paper_stable": cell.paper_stable,
                    }
                    for cell in comparison.cells
                ],
            }
            for comparison in comparisons
        ],
    }


def plan_json(result: Plan) -> dict[str, Any]:
    def design_json(design: DesignPlan) -> dict[str, Any]:
        return {
            "producer_nodes": design.producer_nodes,
            "consumer_nodes": design.consumer_nodes,
            "broker_nodes": design.broker_nodes,
            "drives_per_broker": design.drives_per_broker,
            "drives": design.drives,
            "broker_drive_utilisation": design.broker_drive_utilisation,
            "compute_nic_gbps": design.compute_nic_gbps,
            "broker_nic_gbps": design.broker_nic_gbps,
            "switches": design.switches,
            "switch_ports": design.switch_ports,
            "network": {line.role: line.count for line in design.design.network},
            "warnings": list(design.warnings),
            "cost": breakdown_json(design.cost),
        }

    return {
        "accel": result.accel,
        "streams": result.streams,
        "headroom": result.headroom,
        "calibration": result.calibration_note,
        "throughput_speedup": result.throughput_speedup,
        "disk_write_bytes_per_s": result.disk_write_bytes_per_s,
        "homogeneous": design_json(result.homogeneous),
        "purpose-built": design_json(result.purpose_built),
        "saving_percent": result.saving_percent,
    }


def _bullet(text: str) -> str:
    return textwrap.fill(text, width=110, initial_indent="  - ", subsequent_indent="    ")


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())
