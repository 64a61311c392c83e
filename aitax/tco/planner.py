"""Capacity planner: size and price a homogeneous and a purpose-built edge data center for an AI acceleration.

For `streams` video streams (one ingest/detect producer process each) at acceleration `accel`:

* compute nodes: producers and consumers (`consumers_per_producer` per producer), packed
  `streams_per_compute_node` single-core processes to a node as in the paper's deployment (Sec. 4.2);
* brokers: the fewest (at least the replication factor) whose drives stay below the utilisation ceiling
  and whose NICs carry the replicated traffic, both with `headroom` spare (demand from aitax/tco/capacity.py);
* drives: the design template's per-broker count (homogeneous: every node alike; purpose-built: Table 4's
  four, or `drives_per_broker`);
* NICs and switches: one NIC per node as in the template, the fabric from aitax/tco/topology.py.

Both designs are then priced with the catalog's cost model. Demand grows with the acceleration, so a higher
one never needs fewer brokers or drives.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil

from aitax.common.errors import UserError
from aitax.tco.capacity import (
    Calibration,
    CapacityParameters,
    disk_write_bytes_per_s,
    drive_utilisation,
    effective_drives,
    throughput_speedup,
)
from aitax.tco.catalog import Catalog, Design, NetworkLine, NodeGroup
from aitax.tco.cost import CostBreakdown, cost_design, saving_percent
from aitax.tco.topology import THREE_LEVEL_FAT_TREE, split_two_level_fat_tree, three_level_fat_tree


@dataclass(frozen=True)
class DesignPlan:
    design: Design
    producer_nodes: int
    consumer_nodes: int
    broker_nodes: int
    drives_per_broker: int
    drives: int
    broker_drive_utilisation: float
    compute_nic_gbps: float
    broker_nic_gbps: float
    producer_node_gbps: float
    consumer_node_gbps: float
    broker_node_gbps: float
    switches: int
    switch_ports: int
    cost: CostBreakdown
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    accel: float
    streams: int
    headroom: float
    calibration_note: str
    throughput_speedup: float
    disk_write_bytes_per_s: float
    homogeneous: DesignPlan
    purpose_built: DesignPlan

    @property
    def saving_percent(self) -> float:
        return saving_percent(self.homogeneous.cost, self.purpose_built.cost)


def plan(
    catalog: Catalog,
    calibration: Calibration,
    accel: float,
    streams: int,
    drives_per_broker: int | None = None,
    headroom: float | None = None,
) -> Plan:
    if accel < 1:
        raise UserError(f"--accel must be at least 1 (native speed), got {accel:g}")
    if streams < 1:
        raise UserError(f"--streams must be at least 1, got {streams}")
    if drives_per_broker is not None and drives_per_broker < 1:
        raise UserError(f"--drives-per-broker must be at least 1, got {drives_per_broker}")
    parameters = calibration.parameters
    headroom = parameters.design_headroom if headroom is None else headroom
    if headroom <= 0:
        raise UserError(f"--headroom must be positive, got {headroom:g}")
    sizing = _Sizing(parameters, accel, streams, headroom)
    return Plan(
        accel=accel,
        streams=streams,
        headroom=headroom,
        calibration_note=calibration.note,
        throughput_speedup=throughput_speedup(accel, parameters),
        disk_write_bytes_per_s=sizing.disk_write_bytes_per_s,
        homogeneous=_plan_design(catalog, catalog.designs["homogeneous"], sizing, None),
        purpose_built=_plan_design(catalog, catalog.designs["purpose-built"], sizing, drives_per_broker),
    )


@dataclass(frozen=True)
class _Sizing:
    parameters: CapacityParameters
    accel: float
    streams: int
    headroom: float

    @property
    def disk_write_bytes_per_s(self) -> float:
        return disk_write_bytes_per_s(self.accel, self.streams, self.parameters)

    @property
    def producer_nodes(self) -> int:
        return ceil(self.streams / self.parameters.streams_per_compute_node)

    @property
    def consumer_nodes(self) -> int:
        consumers = self.streams * self.parameters.consumers_per_producer
        return ceil(consumers / self.parameters.streams_per_compute_node)

    @property
    def produced_bytes_per_s(self) -> float:
        return self.disk_write_bytes_per_s / self.parameters.replication_factor

    def brokers(self, drives_per_broker: int, nic_gbps: float) -> int:
        """Fewest brokers whose drives and NICs keep `headroom` spare; a broker receives what it writes."""
        demand = self.disk_write_bytes_per_s * self.headroom
        drive_capacity = (
            self.parameters.drive_write_bytes_per_s
            * self.parameters.utilisation_ceiling
            * effective_drives(drives_per_broker, self.parameters)
        )
        nic_capacity = nic_gbps * 1e9 / 8
        return max(
            self.parameters.replication_factor, ceil(demand / drive_capacity), ceil(demand / nic_capacity)
        )


def _plan_design(
    catalog: Catalog, template: Design, sizing: _Sizing, drives_per_broker: int | None
) -> DesignPlan:
    homogeneous = template.topology == THREE_LEVEL_FAT_TREE.name
    compute_template = template.node_group("node" if homogeneous else "compute")
    broker_template = template.node_group("node" if homogeneous else "broker")
    drive_item = _item_of_kind(catalog, broker_template, "drive", template)
    drives = (
        broker_template.items[drive_item] if drives_per_broker is None or homogeneous else drives_per_broker
    )
    compute_nic = catalog.items[_item_of_kind(catalog, compute_template, "nic", template)].gbps
    broker_nic = catalog.items[_item_of_kind(catalog, broker_template, "nic", template)].gbps

    producers, consumers = sizing.producer_nodes, sizing.consumer_nodes
    brokers = sizing.brokers(drives, broker_nic)
    compute = producers + consumers
    if homogeneous:
        nodes = (replace(compute_template, count=compute + brokers),)
        switch_ports = catalog.items[template.network_line("switch").item].ports
        fabric = three_level_fat_tree(compute + brokers, switch_ports)
    else:
        broker_items = {**broker_template.items, drive_item: drives}
        nodes = (replace(compute_template, count=compute), NodeGroup("broker", brokers, broker_items))
        fabric = split_two_level_fat_tree(
            compute,
            brokers,
            catalog.items[template.network_line("core-switch").item].ports,
            catalog.items[template.network_line("compute-switch").item].ports,
        )
    network = tuple(NetworkLine(line.role, line.item, fabric[line.role]) for line in template.network)
    design = replace(template, nodes=nodes, network=network, reported={})
    switch_lines = [line for line in network if catalog.items[line.item].kind == "switch"]

    produced_gbps = sizing.produced_bytes_per_s * 8 / 1e9
    traffic = {
        "producer": (produced_gbps / producers, compute_nic),
        "consumer": (produced_gbps / consumers, compute_nic),
        "broker": (sizing.disk_write_bytes_per_s * 8 / 1e9 / brokers, broker_nic),
    }
    warnings = tuple(
        f"{role} nodes need {gbps * sizing.headroom:.1f} Gbps with headroom but have {nic:g} GbE NICs"
        for role, (gbps, nic) in traffic.items()
        if gbps * sizing.headroom > nic
    )
    return DesignPlan(
        design=design,
        producer_nodes=producers,
        consumer_nodes=consumers,
        broker_nodes=brokers,
        drives_per_broker=drives,
        drives=sum(group.count * group.items.get(drive_item, 0) for group in nodes),
        broker_drive_utilisation=drive_utilisation(
            sizing.accel, brokers, drives, sizing.parameters, streams=sizing.streams
        ),
        compute_nic_gbps=compute_nic,
        broker_nic_gbps=broker_nic,
        producer_node_gbps=traffic["producer"][0],
        consumer_node_gbps=traffic["consumer"][0],
        broker_node_gbps=traffic["broker"][0],
        switches=sum(line.count for line in switch_lines),
        switch_ports=sum(line.count * catalog.items[line.item].ports for line in switch_lines),
        cost=cost_design(design, catalog),
        warnings=warnings,
    )


def _item_of_kind(catalog: Catalog, group: NodeGroup, kind: str, design: Design) -> str:
    found = [item_id for item_id in group.items if catalog.items[item_id].kind == kind]
    if len(found) != 1:
        raise UserError(
            f"{catalog.path.name}: design {design.name!r}: nodes {group.role!r} need exactly one {kind} item"
            " to plan with"
        )
    return found[0]
