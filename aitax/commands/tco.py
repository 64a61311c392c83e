"""`aitax tco` (cost of the paper's designs, Fig. 15 capacity check), `aitax plan` (size a data center) and `aitax
plan-knee` (where a design breaks, from another design's sweep)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import click

from aitax.commands.options import CONTEXT, FILE, Commands, Parsed, options, schema_command
from aitax.common.errors import UserError
from aitax.tco.capacity import (
    Calibration,
    calibrate_from_emulation,
    catalog_calibration,
    compare_fig15,
    load_emulation_results,
    max_stable_factor,
)
from aitax.tco.catalog import DESIGN_NAMES, Catalog, catalog_json_schema, load_catalog
from aitax.tco.cost import CostBreakdown, cost_design, reported_checks, saving_check, saving_percent
from aitax.tco.planner import plan
from aitax.tco.report import (
    breakdown_json,
    capacity_json,
    checks_json,
    format_capacity,
    format_comparison,
    format_design,
    format_plan,
    plan_json,
)

CATALOG_HELP = "built-in catalog name or path to a catalog YAML file (default: paper, the paper's Tables 3-4)"
EMULATION_HELP = (
    "calibrate the 1x write rate and the unaccelerated fraction from an emulation results JSON"
    " (format: tco.capacity.EmulationResults) instead of the catalog's (the paper's Fig. 11b)"
)


def register(root: click.Group) -> None:
    """Add `tco` (with its actions) and `plan`."""
    root.add_command(tco_group)
    root.add_command(plan_command)
    root.add_command(knee_command)


def _fraction(text: str) -> float:
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise ValueError("not a fraction") from None
    if value <= 0:
        raise ValueError("must be positive")
    return value


def _catalog(default: str | None) -> Any:
    return click.option("--catalog", default=default, help=CATALOG_HELP)


def _json(command: Any) -> Any:
    return click.option("--json", "json_out", type=FILE, metavar="FILE", help="also write JSON")(command)


def _chart(command: Any) -> Any:
    return click.option("--chart", type=FILE, metavar="PNG", help="draw the yearly cost as a bar chart")(command)


def _emulation(command: Any) -> Any:
    return click.option("--from-emulation", type=FILE, metavar="RESULTS.json", help=EMULATION_HELP)(command)


def _before(name: str, value: Any) -> Any:
    """An action's option, else the same option given before the action (`aitax tco --json FILE compare`)."""
    parent = click.get_current_context().parent
    return value if value is not None or parent is None else parent.params[name]


@click.group(
    "tco", cls=Commands, invoke_without_command=True, context_settings=CONTEXT,
    short_help="total cost of ownership of the paper's edge data centers, and their storage capacity",
    help="Price a design of a catalog: line items, equipment total, yearly servers, network and power under a "
         "Coolan-style model (3-year amortisation, $0.10/kWh, cooling doubling power), checked against the paper's "
         "figures. Actions: `compare` puts both designs side by side; `capacity` compares the storage capacity model "
         "with the paper's Fig. 15.")
@options(_catalog("paper"), _chart, _json)
@click.option("--design", type=click.Choice(DESIGN_NAMES), default="homogeneous", show_default=True,
              help="design to price")
@click.pass_context
def tco_group(ctx: click.Context, catalog: str, chart: Path | None, json_out: Path | None, design: str) -> int:
    if ctx.invoked_subcommand is not None:
        return 0  # the action reads these options from this context
    loaded = load_catalog(catalog)
    priced = loaded.designs[design]
    breakdown = cost_design(priced, loaded)
    checks = reported_checks(priced, breakdown)
    print(format_design(loaded, breakdown, checks))
    if chart:
        _draw(chart, [breakdown], f"{priced.name} yearly TCO ({loaded.name})")
    if json_out:
        _write_json(json_out, {**breakdown_json(breakdown), "paper_checks": checks_json(checks)})
    return 0 if all(check.matches for check in checks) else 1


@tco_group.command(short_help="homogeneous vs purpose-built: breakdown, saving, paper check",
                   help="Both designs' equipment and yearly cost side by side, the saving, the paper's figures.")
@options(_catalog(None), _chart, _json)
def compare(catalog: str | None, chart: Path | None, json_out: Path | None) -> int:
    loaded = load_catalog(_before("catalog", catalog))
    chart, json_out = _before("chart", chart), _before("json_out", json_out)
    baseline, other = (cost_design(loaded.designs[name], loaded) for name in DESIGN_NAMES)
    saving = saving_percent(baseline, other)
    checks = reported_checks(loaded.designs[baseline.design], baseline)
    checks += reported_checks(loaded.designs[other.design], other)
    if loaded.reported_saving_percent is not None:
        checks.append(saving_check(saving, loaded.reported_saving_percent))
    print(format_comparison(loaded, baseline, other, saving, checks))
    if chart:
        _draw(chart, [baseline, other], f"Yearly TCO, {saving:.1f}% lower purpose-built ({loaded.name})")
    if json_out:
        document = {
            "designs": [breakdown_json(baseline), breakdown_json(other)],
            "saving_percent": saving,
            "paper_checks": checks_json(checks),
        }
        _write_json(json_out, document)
    return 0 if all(check.matches for check in checks) else 1


@tco_group.command(
    short_help="storage capacity model vs the paper's Fig. 15, cell by cell",
    help="Predict the highest stable AI acceleration from broker storage write demand and compare with every "
         "configuration of the paper's Fig. 15 (drives per broker, broker count, face size), naming the cells the "
         "model does not match. With --brokers, also predict one configuration's limit.")
@options(_catalog(None), _json, _emulation)
@click.option("--brokers", type=int, metavar="N", help="broker count of a configuration to predict")
@click.option("--drives-per-broker", type=int, default=1, metavar="N", help="with --brokers (default: 1)")
@click.option("--face-fraction", type=Parsed("F", _fraction), default=1.0, metavar="F",
              help="with --brokers: face size, e.g. 1/4 (default: 1)")
def capacity(catalog: str | None, json_out: Path | None, from_emulation: Path | None, brokers: int | None,
             drives_per_broker: int, face_fraction: float) -> int:
    loaded = load_catalog(_before("catalog", catalog))
    json_out = _before("json_out", json_out)
    calibration = _calibration(loaded, from_emulation)
    comparisons = compare_fig15(calibration.parameters)
    print(format_capacity(calibration, comparisons))
    if brokers is not None:
        if brokers < 1 or drives_per_broker < 1:
            raise UserError("--brokers and --drives-per-broker must be at least 1")
        limit = max_stable_factor(brokers, drives_per_broker, calibration.parameters, face_fraction)
        verdict = "stable at any acceleration" if math.isinf(limit) else f"stable below {limit:.1f}x"
        print(f"\n{brokers} brokers x {drives_per_broker} drives per broker, face size {face_fraction:g}: {verdict}")
    if json_out:
        _write_json(json_out, capacity_json(calibration, comparisons))
    return 0


tco_group.add_command(schema_command("catalog", "docs/tco-catalog.schema.json", catalog_json_schema))


@click.command(
    "plan", context_settings=CONTEXT,
    short_help="size and price a homogeneous and a purpose-built edge data center for an AI acceleration",
    help="Size producers, consumers, brokers, drives, NICs and switch ports for STREAMS video streams at an AI "
         "acceleration, for a homogeneous and a purpose-built design, and price both.")
@click.option("--accel", type=float, required=True, metavar="FACTOR", help="AI acceleration factor, e.g. 32")
@click.option("--streams", type=int, required=True, help="video streams (one producer process each)")
@_emulation
@_catalog("paper")
@click.option("--drives-per-broker", type=int, metavar="N",
              help="NVMe drives per purpose-built broker (default: the catalog's, 4)")
@click.option("--headroom", type=float, metavar="X",
              help="spare capacity factor on drives and NICs (default: the catalog's, 1)")
@click.option("--json", "json_out", type=FILE, metavar="FILE", help="also write the plan as JSON")
def plan_command(accel: float, streams: int, from_emulation: Path | None, catalog: str,
                 drives_per_broker: int | None, headroom: float | None, json_out: Path | None) -> int:
    loaded = load_catalog(catalog)
    result = plan(loaded, _calibration(loaded, from_emulation), accel, streams, drives_per_broker, headroom)
    print(format_plan(result))
    if json_out:
        _write_json(json_out, plan_json(result))
    return 0


def _calibration(catalog: Catalog, emulation: Path | None) -> Calibration:
    calibration = catalog_calibration(catalog)
    if emulation is None:
        return calibration
    return calibrate_from_emulation(calibration.parameters, load_emulation_results(emulation))


def _draw(path: Path, breakdowns: list[CostBreakdown], title: str) -> None:
    from aitax.tco.chart import draw_cost_chart

    draw_cost_chart(breakdowns, path, title)
    print(f"\nchart: {path}")


def _write_json(path: Path, document: dict[str, Any]) -> None:
    try:
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise UserError(f"{path}: cannot write JSON: {error.strerror}") from error


@click.command(
    "plan-knee", context_settings=CONTEXT,
    short_help="predict where a design breaks, and on what, from a sweep measured on another design",
    help="From the per-face costs a sweep measured (broker CPU, log bytes and network bytes per face, and the load's "
         "CPU), predict each resource's utilisation at each factor on DESIGN (designs/*.yaml, scaled as `aitax "
         "stack up --design` scales it), the knee (the first factor a resource passes 85%) and the resource. With "
         "--compare, a sweep measured on DESIGN: its knee beside the prediction.")
@click.option("--from-emulation", "fed", type=FILE, required=True, metavar="RESULTS.json",
              help="an `aitax emulate` results JSON measured on another design")
@click.option("--design", type=FILE, required=True, metavar="DESIGN.yaml", help="the design to predict")
@click.option("--compare", type=FILE, metavar="RESULTS.json", help="a sweep measured on DESIGN, to check against")
@click.option("--face-scale", type=float, default=1.0, show_default=True,
              help="thumbnails this many times the size of the fed sweep's (Fig. 15c: 0.5, 0.25), as `aitax emulate "
                   "--face-scale` sends them")
def knee_command(fed: Path, design: Path, compare: Path | None, face_scale: float) -> int:
    from aitax.runs.results import SweepResult, read_results
    from aitax.stack.design import load_design
    from aitax.tco.knee import face_costs, point_seconds, predict, read_sweep, with_thumbnails

    sweep = read_sweep(fed)
    declared = load_design(design)
    testbed = declared.testbed()
    costs = with_thumbnails(face_costs(sweep), face_scale)
    factors = sorted({run.workload.factor for run in sweep.runs} | set(sweep.skipped_factors))
    measured = read_results(compare, SweepResult) if compare else None  # a design that broke at once has no runs
    if measured is not None:
        factors = sorted({*factors, *(run.workload.factor for run in measured.runs), *measured.skipped_factors})
    point_s = point_seconds(measured if measured is not None and measured.runs else sweep)
    print(f"per face, read at {costs.read_at} of {fed}: brokers {costs.broker_cpu_s * 1e3:.2f} CPU-ms, "
          f"{costs.broker_write_bytes / 1e3:.0f} kB appended, {costs.network_bytes / 1e3:.0f} kB on the wire; "
          f"the load {costs.load_cpu_s * 1e3:.2f} CPU-ms"
          + (f" (thumbnails {face_scale:g} times the size: {costs.thumbnail_bytes / 1e3:.1f} kB)" if face_scale != 1
             else ""))
    predictions = predict(costs, testbed, declared.brokers, declared.broker.drives.count, factors, point_s)
    print(f"{declared.name} at 1/{testbed.scale:g}, predicted utilisation in steady state"
          + (f", and each drive's backlog in a {point_s:.0f} s point against its freerun "
             f"(page cache {testbed.dirty_bytes_per_drive / 2**20:.0f} MiB a drive)" if testbed.drive_bytes_per_s
             else "") + ":")
    _print_predictions(predictions)
    _print_knees(predictions, measured, compare, factors, point_s)
    return 0


def _print_predictions(predictions: list) -> None:
    names = list(predictions[0].utilisation)
    cache = predictions[0].page_cache is not None
    print(f"{'factor':>8}{'faces/s':>9}" + "".join(f"{name:>26}" for name in names)
          + (f"{'backlog/freerun':>17}" if cache else ""))
    for prediction in predictions:
        print(f"{prediction.factor:>7g}x{prediction.offered_faces_per_s:>9.0f}"
              + "".join(f"{prediction.utilisation[name]:>26.0%}" for name in names)
              + (f"{prediction.page_cache:>17.0%}" if cache else ""))


def _print_knees(predictions: list, measured, compare: Path | None, factors: list[float], point_s: float) -> None:
    """The steady state's knee, the sweep's, and with a measured sweep its knee beside the sweep's prediction."""
    from aitax.tco.knee import first_saturated, measured_knee, predicted_knee, predicted_sweep_knee, within_one_step

    steady, in_sweep = predicted_knee(predictions), predicted_sweep_knee(predictions)
    print("predicted knee in steady state: " + ("none within the factors" if steady is None else
                                                f"{steady.factor:g}x ({steady.offered_faces_per_s:.0f} faces/s), "
                                                f"{steady.busiest[0]} at {steady.busiest[1]:.0%}"))
    print(f"predicted knee in a sweep of {point_s:.0f} s points: "
          + ("none within the factors" if in_sweep is None else
             f"{in_sweep.factor:g}x ({in_sweep.offered_faces_per_s:.0f} faces/s), {in_sweep.breaks_point}"))
    if measured is None:
        return
    actual = measured_knee(measured)
    held = within_one_step(None if in_sweep is None else in_sweep.factor, actual, factors)
    print(f"measured knee: {'none within the factors' if actual is None else f'{actual:g}x'} ({compare}); "
          f"the sweep's prediction {'is' if held else 'is NOT'} within one factor step")
    saturated = first_saturated(measured)
    print("first resource measured past 85%: " + ("none" if saturated is None
                                                   else f"at {saturated[0]:g}x, {saturated[1]}"))
