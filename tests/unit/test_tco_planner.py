"""Fabric counts and the capacity planner's sizing invariants."""

from __future__ import annotations

from dataclasses import replace

import pytest

from aitax.common.errors import UserError
from aitax.tco.capacity import Calibration, catalog_calibration, drive_utilisation
from aitax.tco.catalog import Catalog, load_catalog
from aitax.tco.planner import plan
from aitax.tco.topology import split_two_level_fat_tree, three_level_fat_tree

PAPER_STREAMS = 289 * 56  # Table 4's 289 producer nodes of 56 single-core processes


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog("paper")


@pytest.fixture(scope="module")
def calibration(catalog: Catalog) -> Calibration:
    return catalog_calibration(catalog)


def test_three_level_fat_tree_gives_table_3_counts() -> None:
    assert three_level_fat_tree(1024, 32) == {"switch": 160, "link-cable": 3072}


def test_split_fabric_gives_table_4_counts_except_the_uplink_splitters(catalog: Catalog) -> None:
    counts = split_two_level_fat_tree(867, 157, 32, 32)
    table_4 = {line.role: line.count for line in catalog.designs["purpose-built"].network}

    assert {role: count for role, count in counts.items() if role != "uplink-splitter"} == {
        role: count for role, count in table_4.items() if role != "uplink-splitter"
    }
    assert counts["uplink-splitter"] == 14 * 8  # Fig. 16's wiring; Table 4 lists 7


def test_fabrics_refuse_sizes_they_cannot_wire() -> None:
    with pytest.raises(UserError, match="exceed a three-level fat-tree of 32-port switches"):
        three_level_fat_tree(9000, 32)
    with pytest.raises(UserError, match="edge switches, more than a two-level fat-tree"):
        split_two_level_fat_tree(5000, 100, 32, 32)


def test_paper_deployment_at_32x_sizes_close_to_the_papers_design(
    catalog: Catalog, calibration: Calibration
) -> None:
    result = plan(catalog, calibration, 32, PAPER_STREAMS)
    homogeneous, purpose_built = result.homogeneous, result.purpose_built

    assert (homogeneous.producer_nodes, homogeneous.consumer_nodes) == (289, 578)
    # 8 brokers per 45 compute nodes held 32x in Fig. 15b; the paper scaled that to 157 for 867 compute nodes.
    assert 140 <= homogeneous.broker_nodes <= 157
    assert purpose_built.drives_per_broker == 4
    assert purpose_built.broker_nodes < homogeneous.broker_nodes
    assert purpose_built.cost.yearly_total_usd < homogeneous.cost.yearly_total_usd
    assert result.saving_percent > 0


def test_brokers_keep_writes_under_the_ceiling_and_are_the_fewest(
    catalog: Catalog, calibration: Calibration
) -> None:
    parameters = calibration.parameters
    result = plan(catalog, calibration, 16, 2000)

    for design in (result.homogeneous, result.purpose_built):
        brokers, drives = design.broker_nodes, design.drives_per_broker
        assert design.broker_drive_utilisation < parameters.utilisation_ceiling
        at_one_fewer = drive_utilisation(16, brokers - 1, drives, parameters, streams=2000)
        assert brokers == parameters.replication_factor or at_one_fewer >= parameters.utilisation_ceiling


def test_never_fewer_brokers_than_the_replication_factor(catalog: Catalog, calibration: Calibration) -> None:
    result = plan(catalog, calibration, 1, 10)

    assert result.homogeneous.broker_nodes == 3
    assert result.purpose_built.broker_nodes == 3


@pytest.mark.parametrize("streams", [56, 840, 5000, PAPER_STREAMS])
def test_higher_acceleration_never_needs_fewer_brokers_or_drives(
    catalog: Catalog, calibration: Calibration, streams: int
) -> None:
    plans = [plan(catalog, calibration, accel, streams) for accel in (1, 2, 4, 6, 8, 12, 16, 24, 32, 64, 128)]

    for design in ("homogeneous", "purpose_built"):
        brokers = [getattr(result, design).broker_nodes for result in plans]
        drives = [getattr(result, design).drives for result in plans]
        assert brokers == sorted(brokers)
        assert drives == sorted(drives)
    if streams >= 840:  # fewer streams fit on the replication factor's 3 brokers at any speed
        assert plans[-1].homogeneous.broker_nodes > plans[0].homogeneous.broker_nodes


def test_more_drives_per_broker_need_fewer_brokers(catalog: Catalog, calibration: Calibration) -> None:
    one = plan(catalog, calibration, 32, 5000, drives_per_broker=1).purpose_built
    four = plan(catalog, calibration, 32, 5000, drives_per_broker=4).purpose_built

    assert four.broker_nodes < one.broker_nodes
    assert four.design.node_group("broker").items["p4510-1tb"] == 4


def test_headroom_multiplies_the_capacity_needed(catalog: Catalog, calibration: Calibration) -> None:
    plain = plan(catalog, calibration, 32, 5000)
    doubled = plan(catalog, calibration, 32, 5000, headroom=2)

    assert doubled.homogeneous.broker_nodes >= 2 * plain.homogeneous.broker_nodes - 1
    assert doubled.homogeneous.broker_drive_utilisation < calibration.parameters.utilisation_ceiling / 2


def test_plan_prices_what_it_sized(catalog: Catalog, calibration: Calibration) -> None:
    result = plan(catalog, calibration, 8, 840).purpose_built
    nodes = {group.role: group.count for group in result.design.nodes}

    assert nodes == {"compute": result.producer_nodes + result.consumer_nodes, "broker": result.broker_nodes}
    assert result.cost.nodes == sum(nodes.values())
    assert result.cost.equipment_usd() > 0


def test_slow_compute_nics_are_flagged(catalog: Catalog, calibration: Calibration) -> None:
    # Without an unaccelerated part throughput grows without bound and outruns 10 GbE compute links.
    linear = Calibration(replace(calibration.parameters, unaccelerated_fraction=0.0), "linear")

    result = plan(catalog, linear, 2000, 840)

    assert any("producer nodes need" in warning for warning in result.purpose_built.warnings)
    assert not plan(catalog, calibration, 32, 840).purpose_built.warnings


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"accel": 0.5, "streams": 10}, "--accel must be at least 1"),
        ({"accel": 8, "streams": 0}, "--streams must be at least 1"),
        ({"accel": 8, "streams": 10, "drives_per_broker": 0}, "--drives-per-broker must be at least 1"),
        ({"accel": 8, "streams": 10, "headroom": -1}, "--headroom must be positive"),
    ],
)
def test_bad_plan_requests_are_user_errors(
    catalog: Catalog, calibration: Calibration, kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(UserError, match=message):
        plan(catalog, calibration, **kwargs)  # type: ignore[arg-type]
