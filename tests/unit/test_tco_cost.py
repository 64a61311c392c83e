"""The cost model: the paper's totals from its line items, amortisation and power arithmetic."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from aitax.common.errors import UserError
from aitax.tco.catalog import CATALOG_DIR, Catalog, Design, NetworkLine, NodeGroup, Parameter, load_catalog
from aitax.tco.cost import cost_design, cost_parameters, reported_checks, saving_check, saving_percent


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog("paper")


def with_cost(catalog: Catalog, **values: float) -> Catalog:
    cost = {**catalog.cost, **{name: Parameter(value, "test") for name, value in values.items()}}
    return replace(catalog, cost=cost)


def small_design() -> Design:
    """10 base servers and 2 switches, nothing else: easy to price by hand."""
    return Design(
        name="small",
        description="",
        topology="three-level-fat-tree",
        nodes=(NodeGroup("node", 10, {"r740xd-base": 1}),),
        network=(NetworkLine("switch", "msn2700-cs2f", 2),),
        reported={},
    )


def test_equipment_totals_reproduce_tables_3_and_4_exactly(catalog: Catalog) -> None:
    homogeneous = cost_design(catalog.designs["homogeneous"], catalog)
    purpose_built = cost_design(catalog.designs["purpose-built"], catalog)

    assert homogeneous.equipment_usd() == 33_577_760
    assert purpose_built.equipment_usd() == 27_878_431


def test_yearly_figures_round_to_the_papers(catalog: Catalog) -> None:
    homogeneous = cost_design(catalog.designs["homogeneous"], catalog)
    purpose_built = cost_design(catalog.designs["purpose-built"], catalog)

    assert round(homogeneous.yearly_servers_usd / 1e6, 1) == 10.2
    assert round(homogeneous.yearly_network_usd / 1e6, 1) == 1.3
    assert round(homogeneous.yearly_power_usd / 1e6, 1) == 1.4
    assert round(homogeneous.yearly_total_usd / 1e6, 1) == 12.9
    assert round(purpose_built.yearly_power_usd / 1e6, 1) == 1.4
    assert round(purpose_built.yearly_total_usd / 1e6, 1) == 10.8
    assert round(saving_percent(homogeneous, purpose_built), 1) == 16.6


def test_every_paper_check_matches(catalog: Catalog) -> None:
    breakdowns = {name: cost_design(design, catalog) for name, design in catalog.designs.items()}
    checks = [
        check
        for name, design in catalog.designs.items()
        for check in reported_checks(design, breakdowns[name])
    ]
    saving = saving_percent(breakdowns["homogeneous"], breakdowns["purpose-built"])
    checks.append(saving_check(saving, 16.6))

    assert len(checks) == 9
    assert [check.label for check in checks if not check.matches] == []


def test_a_changed_price_is_reported_as_a_mismatch(catalog: Catalog) -> None:
    cheaper = replace(
        catalog, items={**catalog.items, "mcp1600": replace(catalog.items["mcp1600"], price_usd=90)}
    )
    breakdown = cost_design(cheaper.designs["homogeneous"], cheaper)

    equipment = reported_checks(cheaper.designs["homogeneous"], breakdown)[0]
    assert equipment.label == "homogeneous equipment"
    assert not equipment.matches


def test_server_capex_is_equipment_plus_racks_over_the_amortisation_life(catalog: Catalog) -> None:
    catalog = with_cost(catalog, amortisation_years=3, servers_per_rack=4, rack_usd=1000)
    breakdown = cost_design(small_design(), catalog)

    assert breakdown.racks == 3  # ceil(10 / 4)
    assert breakdown.yearly_servers_usd == pytest.approx((10 * 28_731 + 3 * 1000) / 3)


def test_longer_amortisation_lowers_yearly_capex_but_not_power(catalog: Catalog) -> None:
    three = cost_design(small_design(), with_cost(catalog, amortisation_years=3))
    five = cost_design(small_design(), with_cost(catalog, amortisation_years=5))

    assert five.yearly_servers_usd == pytest.approx(three.yearly_servers_usd * 3 / 5)
    assert five.yearly_network_usd == pytest.approx(three.yearly_network_usd * 3 / 5)
    assert five.yearly_power_usd == three.yearly_power_usd


def test_network_capex_carries_the_overhead_fraction(catalog: Catalog) -> None:
    catalog = with_cost(catalog, amortisation_years=2, network_overhead_fraction=0.5)
    breakdown = cost_design(small_design(), catalog)

    assert breakdown.yearly_network_usd == pytest.approx(2 * 17_285 * 1.5 / 2)


def test_power_is_rated_watts_times_utilisation_cooling_hours_and_price(catalog: Catalog) -> None:
    catalog = with_cost(
        catalog,
        server_utilisation=0.8,
        switch_utilisation=0.5,
        cooling_overhead=1.0,
        hours_per_year=8760,
        electricity_usd_per_kwh=0.10,
    )
    breakdown = cost_design(small_design(), catalog)

    it_watts = 10 * 750 * 0.8 + 2 * 398 * 0.5
    assert breakdown.it_watts == pytest.approx(it_watts)
    assert breakdown.full_load_it_watts == 10 * 750 + 2 * 398
    assert breakdown.yearly_power_usd == pytest.approx(it_watts / 1000 * 2 * 8760 * 0.10)


def test_paper_full_load_power_is_below_the_power_paragraphs_921_kw(catalog: Catalog) -> None:
    breakdown = cost_design(catalog.designs["homogeneous"], catalog)

    assert breakdown.full_load_it_watts == 1024 * 750 + 160 * 398  # 831.7 kW, not 921 kW


def test_missing_cost_parameter_is_named(catalog: Catalog) -> None:
    cost = {name: value for name, value in catalog.cost.items() if name != "rack_usd"}

    with pytest.raises(UserError, match=r"paper.yaml: cost parameter 'rack_usd' is missing"):
        cost_parameters(replace(catalog, cost=cost))


def test_whole_number_parameter_must_be_whole(tmp_path: Path) -> None:
    raw = yaml.safe_load((CATALOG_DIR / "paper.yaml").read_text(encoding="utf-8"))
    raw["cost"]["amortisation_years"]["value"] = 2.5
    path = tmp_path / "half.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")

    with pytest.raises(
        UserError, match=r"half.yaml: cost parameter 'amortisation_years' must be a whole number"
    ):
        cost_parameters(load_catalog(str(path)))
