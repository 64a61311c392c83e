"""`aitax tco` (cost of the paper's designs, Fig. 15 capacity check) and `aitax plan` (size a data center)."""

from __future__ import annotations

import argparse
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

from aitax.commands.options import add_schema_action, write_schema
from common.errors import UserError
from tco.capacity import (
    Calibration,
    calibrate_from_emulation,
    catalog_calibration,
    compare_fig15,
    load_emulation_results,
    max_stable_factor,
)
from tco.catalog import DESIGN_NAMES, Catalog, catalog_json_schema, load_catalog
from tco.cost import CostBreakdown, cost_design, reported_checks, saving_check, saving_percent
from tco.planner import plan
from tco.report import (
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


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `tco` (with its actions) and `plan`."""
    _tco_command(subparsers)
    _plan_command(subparsers)


def _tco_command(subparsers: argparse._SubParsersAction) -> None:
    tco = subparsers.add_parser(
        "tco",
        help="total cost of ownership of the paper's edge data centers, and their storage capacity",
        description=(
            "Price a design of a catalog: line items, equipment total, yearly servers, network and power"
            " under a Coolan-style model (3-year amortisation, $0.10/kWh, cooling doubling power), checked"
            " against the paper's figures. Actions: `compare` puts both designs side by side; `capacity`"
            " compares the storage capacity model with the paper's Fig. 15."
        ),
    )
    _add_output_options(tco, suppress=False)
    tco.add_argument(
        "--design", choices=DESIGN_NAMES, default="homogeneous", help="design to price (default: homogeneous)"
    )
    tco.set_defaults(func=run_design)
    actions = tco.add_subparsers(dest="tco_action", metavar="ACTION")
    _compare_action(actions)
    _capacity_action(actions)
    add_schema_action(actions, "catalog", "docs/tco-catalog.schema.json", run_schema)


def _compare_action(actions: argparse._SubParsersAction) -> None:
    compare = actions.add_parser(
        "compare",
        help="homogeneous vs purpose-built: breakdown, saving, paper check",
        description="Both designs' equipment and yearly cost side by side, the saving, the paper's figures.",
    )
    _add_output_options(compare, suppress=True)
    compare.set_defaults(func=run_compare)


def _capacity_action(actions: argparse._SubParsersAction) -> None:
    capacity = actions.add_parser(
        "capacity",
        help="storage capacity model vs the paper's Fig. 15, cell by cell",
        description=(
            "Predict the highest stable AI acceleration from broker storage write demand and compare with"
            " every configuration of the paper's Fig. 15 (drives per broker, broker count, face size), naming"
            " the cells the model does not match. With --brokers, also predict one configuration's limit."
        ),
    )
    capacity.add_argument("--catalog", default=argparse.SUPPRESS, help=CATALOG_HELP)
    capacity.add_argument(
        "--json", type=Path, default=argparse.SUPPRESS, metavar="FILE", help="also write JSON"
    )
    capacity.add_argument("--from-emulation", type=Path, metavar="RESULTS.json", help=EMULATION_HELP)
    capacity.add_argument(
        "--brokers", type=int, metavar="N", help="broker count of a configuration to predict"
    )
    capacity.add_argument(
        "--drives-per-broker", type=int, default=1, metavar="N", help="with --brokers (default: 1)"
    )
    capacity.add_argument(
        "--face-fraction",
        type=_fraction,
        metavar="F",
        default=1.0,
        help="with --brokers: face size, e.g. 1/4 (default: 1)",
    )
    capacity.set_defaults(func=run_capacity)


def _plan_command(subparsers: argparse._SubParsersAction) -> None:
    planner = subparsers.add_parser(
        "plan",
        help="size and price a homogeneous and a purpose-built edge data center for an AI acceleration",
        description=(
            "Size producers, consumers, brokers, drives, NICs and switch ports for STREAMS video streams at"
            " an AI acceleration, for a homogeneous and a purpose-built design, and price both."
        ),
    )
    planner.add_argument(
        "--accel", type=float, required=True, metavar="FACTOR", help="AI acceleration factor, e.g. 32"
    )
    planner.add_argument(
        "--streams", type=int, required=True, help="video streams (one producer process each)"
    )
    planner.add_argument("--from-emulation", type=Path, metavar="RESULTS.json", help=EMULATION_HELP)
    planner.add_argument("--catalog", default="paper", help=CATALOG_HELP)
    planner.add_argument(
        "--drives-per-broker",
        type=int,
        metavar="N",
        help="NVMe drives per purpose-built broker (default: the catalog's, 4)",
    )
    planner.add_argument(
        "--headroom",
        type=float,
        metavar="X",
        help="spare capacity factor on drives and NICs (default: the catalog's, 1)",
    )
    planner.add_argument("--json", type=Path, metavar="FILE", help="also write the plan as JSON")
    planner.set_defaults(func=run_plan)


def _add_output_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    # Actions take the same options as `tco`; SUPPRESS keeps a value given before the action.
    parser.add_argument("--catalog", default=argparse.SUPPRESS if suppress else "paper", help=CATALOG_HELP)
    parser.add_argument(
        "--chart",
        type=Path,
        default=argparse.SUPPRESS if suppress else None,
        metavar="PNG",
        help="draw the yearly cost as a bar chart",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=argparse.SUPPRESS if suppress else None,
        metavar="FILE",
        help="also write JSON",
    )


def run_schema(args: argparse.Namespace) -> int:
    return write_schema(catalog_json_schema(), args.out)


def run_design(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog)
    design = catalog.designs[args.design]
    breakdown = cost_design(design, catalog)
    checks = reported_checks(design, breakdown)
    print(format_design(catalog, breakdown, checks))
    if args.chart:
        _draw(args.chart, [breakdown], f"{design.name} yearly TCO ({catalog.name})")
    if args.json:
        _write_json(args.json, {**breakdown_json(breakdown), "paper_checks": checks_json(checks)})
    return 0 if all(check.matches for check in checks) else 1


def run_compare(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog)
    baseline, other = (cost_design(catalog.designs[name], catalog) for name in DESIGN_NAMES)
    saving = saving_percent(baseline, other)
    checks = reported_checks(catalog.designs[baseline.design], baseline)
    checks += reported_checks(catalog.designs[other.design], other)
    if catalog.reported_saving_percent is not None:
        checks.append(saving_check(saving, catalog.reported_saving_percent))
    print(format_comparison(catalog, baseline, other, saving, checks))
    if args.chart:
        _draw(
            args.chart, [baseline, other], f"Yearly TCO, {saving:.1f}% lower purpose-built ({catalog.name})"
        )
    if args.json:
        document = {
            "designs": [breakdown_json(baseline), breakdown_json(other)],
            "saving_percent": saving,
            "paper_checks": checks_json(checks),
        }
        _write_json(args.json, document)
    return 0 if all(check.matches for check in checks) else 1


def run_capacity(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog)
    calibration = _calibration(catalog, args.from_emulation)
    comparisons = compare_fig15(calibration.parameters)
    print(format_capacity(calibration, comparisons))
    if args.brokers is not None:
        if args.brokers < 1 or args.drives_per_broker < 1:
            raise UserError("--brokers and --drives-per-broker must be at least 1")
        limit = max_stable_factor(
            args.brokers, args.drives_per_broker, calibration.parameters, args.face_fraction
        )
        verdict = "stable at any acceleration" if math.isinf(limit) else f"stable below {limit:.1f}x"
        print(
            f"\n{args.brokers} brokers x {args.drives_per_broker} drives per broker,"
            f" face size {args.face_fraction:g}: {verdict}"
        )
    if args.json:
        _write_json(args.json, capacity_json(calibration, comparisons))
    return 0


def run_plan(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog)
    calibration = _calibration(catalog, args.from_emulation)
    result = plan(catalog, calibration, args.accel, args.streams, args.drives_per_broker, args.headroom)
    print(format_plan(result))
    if args.json:
        _write_json(args.json, plan_json(result))
    return 0


def _calibration(catalog: Catalog, emulation: Path | None) -> Calibration:
    calibration = catalog_calibration(catalog)
    if emulation is None:
        return calibration
    return calibrate_from_emulation(calibration.parameters, load_emulation_results(emulation))


def _draw(path: Path, breakdowns: list[CostBreakdown], title: str) -> None:
    from tco.chart import draw_cost_chart

    draw_cost_chart(breakdowns, path, title)
    print(f"\nchart: {path}")


def _write_json(path: Path, document: dict[str, Any]) -> None:
    try:
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise UserError(f"{path}: cannot write JSON: {error.strerror}") from error


def _fraction(text: str) -> float:
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError) as error:
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r}") from error
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value
