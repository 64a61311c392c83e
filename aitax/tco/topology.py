"""Switch and cable counts for the paper's two fabrics, for any number of nodes.

A topology names the node roles a design must have and the network roles its fabric items play; the count
functions size each network role. Both give the paper's counts for its 1,024-node designs (tests check it).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from aitax.common.errors import UserError


@dataclass(frozen=True)
class Topology:
    name: str
    node_roles: tuple[str, ...]
    network_roles: tuple[str, ...]


# Table 3: identical nodes on a non-blocking three-level fat-tree of 32-port 100 GbE switches.
THREE_LEVEL_FAT_TREE = Topology("three-level-fat-tree", ("node",), ("switch", "link-cable"))
# Fig. 16: a two-level 100 GbE fat-tree; brokers get 50 GbE through 2-way splitters, compute nodes 10 GbE
# through 40 GbE switches and 4-way splitters.
SPLIT_TWO_LEVEL_FAT_TREE = Topology(
    "split-two-level-fat-tree",
    ("compute", "broker"),
    (
        "core-switch",
        "compute-switch",
        "uplink-splitter",
        "compute-splitter",
        "broker-splitter",
        "interconnect",
    ),
)
TOPOLOGIES = {topology.name: topology for topology in (THREE_LEVEL_FAT_TREE, SPLIT_TWO_LEVEL_FAT_TREE)}


def three_level_fat_tree(nodes: int, ports: int) -> dict[str, int]:
    """Edge, aggregation and core switches; edge and aggregation switches use half their ports up."""
    half = ports // 2
    edge = ceil(nodes / half)
    if edge > ports * half:
        raise UserError(
            f"{nodes} nodes exceed a three-level fat-tree of {ports}-port switches ({ports**3 // 4} nodes)"
        )
    aggregation = edge
    core = ceil(edge * half / ports)
    links = nodes + half * edge + half * aggregation
    return {"switch": edge + aggregation + core, "link-cable": links}


def split_two_level_fat_tree(
    compute_nodes: int, brokers: int, ports_100g: int, ports_40g: int
) -> dict[str, int]:
    """Fig. 16's fabric.

    A 40 GbE switch serves 4 compute nodes on each of its 16 down ports and takes 16 x 50 GbE up from 8
    split 100 GbE edge ports, so one 100 GbE edge switch (16 down ports) feeds two of them or 32 brokers.
    Every edge switch has one uplink to each of the 16 core switches.

    Table 4 lists 7 100-to-2x50 GbE optical splitters; the wiring Fig. 16 describes needs 8 per 40 GbE switch
    (112 for 14 switches). This function counts what the wiring needs; the catalog keeps the paper's 7.
    """
    edge_down = ports_100g // 2
    compute_down = ports_40g // 2
    compute_switches = ceil(compute_nodes / (compute_down * 4))
    uplink_splitters = compute_switches * (ports_40g // 2) // 2
    compute_edges = ceil(uplink_splitters / edge_down)
    broker_edges = ceil(brokers / (edge_down * 2))
    edges = compute_edges + broker_edges
    if edges > ports_100g:
        raise UserError(
            f"{compute_nodes} compute nodes and {brokers} brokers need {edges} edge switches, more than a"
            f" two-level fat-tree of {ports_100g}-port switches holds ({ports_100g})"
        )
    return {
        "core-switch": edges + edge_down,
        "compute-switch": compute_switches,
        "uplink-splitter": uplink_splitters,
        "compute-splitter": ceil(compute_nodes / 4),
        "broker-splitter": ceil(brokers / 2),
        "interconnect": edges * edge_down,
    }
