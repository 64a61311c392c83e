"""Catalogs as data: a price list, the designs built from it, and the named assumptions of the models.

A catalog is a YAML file (see `tco/catalogs/paper.yaml` for the format). `load_catalog("paper")` reads a
built-in one, `load_catalog("path/to/file.yaml")` any other. Loading validates everything once, so the models
can trust the data: a bad entry raises `UserError` naming the file, the entry and the field.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from common.errors import UserError
from tco.topology import TOPOLOGIES

CATALOG_DIR = Path(__file__).parent / "catalogs"
DESIGN_NAMES = ("homogeneous", "purpose-built")
ITEM_KINDS = ("server", "cpu", "memory", "drive", "nic", "switch", "cable")
REPORTED_FIELDS = (
    "equipment_usd",
    "yearly_servers_musd",
    "yearly_network_musd",
    "yearly_power_musd",
    "yearly_total_musd",
)


@dataclass(frozen=True)
class Item:
    id: str
    name: str
    kind: str
    price_usd: float
    rated_watts: float = 0.0
    gbps: float = 0.0  # NICs and switches
    ports: int = 0  # switches


@dataclass(frozen=True)
class NodeGroup:
    """`count` identical nodes, each holding `items` (item id -> quantity per node)."""

    role: str
    count: int
    items: dict[str, int]


@dataclass(frozen=True)
class NetworkLine:
    role: str
    item: str
    count: int


@dataclass(frozen=True)
class Design:
    name: str
    description: str
    topology: str
    nodes: tuple[NodeGroup, ...]
    network: tuple[NetworkLine, ...]
    reported: dict[str, float]

    def node_group(self, role: str) -> NodeGroup:
        return next(group for group in self.nodes if group.role == role)

    def network_line(self, role: str) -> NetworkLine:
        return next(line for line in self.network if line.role == role)


@dataclass(frozen=True)
class Parameter:
    value: float
    source: str


@dataclass(frozen=True)
class Catalog:
    name: str
    path: Path
    description: str
    items: dict[str, Item]
    designs: dict[str, Design]
    cost: dict[str, Parameter]
    capacity: dict[str, Parameter]
    reported_saving_percent: float | None
    notes: tuple[str, ...]


def builtin_catalogs() -> list[str]:
    return sorted(path.stem for path in CATALOG_DIR.glob("*.yaml"))


def resolve_catalog_path(name_or_path: str) -> Path:
    """A built-in catalog name (`paper`) or a path to a YAML file."""
    builtin = CATALOG_DIR / f"{name_or_path}.yaml"
    if builtin.is_file():
        return builtin
    path = Path(name_or_path)
    if path.is_file():
        return path
    raise UserError(
        f"unknown catalog {name_or_path!r}: not a built-in ({', '.join(builtin_catalogs())}) nor a YAML file"
    )


def load_catalog(name_or_path: str) -> Catalog:
    path = resolve_catalog_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise UserError(f"{path}: cannot read catalog: {str(error).splitlines()[0]}") from error
    return _parse_catalog(path, _mapping(raw, f"{path.name}"))


def _parse_catalog(path: Path, raw: dict[str, Any]) -> Catalog:
    where = path.name
    items = {
        item_id: _parse_item(
            item_id, _mapping(entry, f"{where}: item {item_id!r}"), f"{where}: item {item_id!r}"
        )
        for item_id, entry in _mapping(_required(raw, "items", where), f"{where}: items").items()
    }
    raw_designs = _mapping(_required(raw, "designs", where), f"{where}: designs")
    for name in DESIGN_NAMES:
        if name not in raw_designs:
            raise UserError(
                f"{where}: design {name!r} is missing (catalogs need {' and '.join(DESIGN_NAMES)})"
            )
    designs = {
        name: _parse_design(
            name, _mapping(entry, f"{where}: design {name!r}"), items, f"{where}: design {name!r}"
        )
        for name, entry in raw_designs.items()
    }
    saving = raw.get("reported_saving_percent")
    notes = raw.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise UserError(f"{where}: notes must be a list of strings")
    return Catalog(
        name=str(raw.get("name", path.stem)),
        path=path,
        description=str(raw.get("description", "")),
        items=items,
        designs=designs,
        cost=_parse_parameters(_required(raw, "cost", where), f"{where}: cost"),
        capacity=_parse_parameters(_required(raw, "capacity", where), f"{where}: capacity"),
        reported_saving_percent=None
        if saving is None
        else _number(saving, f"{where}: reported_saving_percent"),
        notes=tuple(" ".join(note.split()) for note in notes),
    )


def _parse_item(item_id: str, raw: dict[str, Any], where: str) -> Item:
    kind = str(_required(raw, "kind", where))
    if kind not in ITEM_KINDS:
        raise UserError(f"{where}: kind must be one of {', '.join(ITEM_KINDS)}, got {kind!r}")
    ports = raw.get("ports")
    gbps = raw.get("gbps")
    if kind == "switch" and (ports is None or gbps is None):
        raise UserError(f"{where}: a switch needs 'ports' and 'gbps'")
    if kind == "nic" and gbps is None:
        raise UserError(f"{where}: a nic needs 'gbps'")
    return Item(
        id=item_id,
        name=str(_required(raw, "name", where)),
        kind=kind,
        price_usd=_number(_required(raw, "price_usd", where), f"{where}: price_usd"),
        rated_watts=_number(raw.get("rated_watts", 0), f"{where}: rated_watts"),
        gbps=0.0 if gbps is None else _number(gbps, f"{where}: gbps", positive=True),
        ports=0 if ports is None else _count(ports, f"{where}: ports", positive=True),
    )


def _parse_design(name: str, raw: dict[str, Any], items: dict[str, Item], where: str) -> Design:
    topology_name = str(_required(raw, "topology", where))
    topology = TOPOLOGIES.get(topology_name)
    if topology is None:
        raise UserError(f"{where}: unknown topology {topology_name!r} (known: {', '.join(TOPOLOGIES)})")
    raw_nodes = _mapping(_required(raw, "nodes", where), f"{where}: nodes")
    if set(raw_nodes) != set(topology.node_roles):
        raise UserError(
            f"{where}: topology {topology.name} needs node groups {', '.join(topology.node_roles)}"
        )
    nodes = tuple(
        _parse_node_group(
            role, _mapping(entry, f"{where}: nodes {role!r}"), items, f"{where}: nodes {role!r}"
        )
        for role, entry in raw_nodes.items()
    )
    raw_network = _mapping(_required(raw, "network", where), f"{where}: network")
    if set(raw_network) != set(topology.network_roles):
        raise UserError(
            f"{where}: topology {topology.name} needs network roles {', '.join(topology.network_roles)}"
        )
    network = tuple(
        _parse_network_line(
            role, _mapping(entry, f"{where}: network {role!r}"), items, f"{where}: network {role!r}"
        )
        for role, entry in raw_network.items()
    )
    reported = _mapping(raw.get("reported", {}), f"{where}: reported")
    for field in reported:
        if field not in REPORTED_FIELDS:
            raise UserError(
                f"{where}: reported: unknown field {field!r} (known: {', '.join(REPORTED_FIELDS)})"
            )
    return Design(
        name=name,
        description=str(raw.get("description", "")),
        topology=topology.name,
        nodes=nodes,
        network=network,
        reported={field: _number(value, f"{where}: reported {field}") for field, value in reported.items()},
    )


def _parse_node_group(role: str, raw: dict[str, Any], items: dict[str, Item], where: str) -> NodeGroup:
    per_node = _mapping(_required(raw, "items", where), f"{where}: items")
    for item_id in per_node:
        _known_item(item_id, items, where)
    servers = [item_id for item_id in per_node if items[item_id].kind == "server"]
    if len(servers) != 1 or per_node[servers[0]] != 1:
        raise UserError(f"{where}: a node needs exactly one server item with quantity 1")
    return NodeGroup(
        role=role,
        count=_count(_required(raw, "count", where), f"{where}: count"),
        items={
            item_id: _count(quantity, f"{where}: item {item_id!r} quantity")
            for item_id, quantity in per_node.items()
        },
    )


def _parse_network_line(role: str, raw: dict[str, Any], items: dict[str, Item], where: str) -> NetworkLine:
    item_id = str(_required(raw, "item", where))
    _known_item(item_id, items, where)
    return NetworkLine(
        role=role, item=item_id, count=_count(_required(raw, "count", where), f"{where}: count")
    )


def _parse_parameters(raw: Any, where: str) -> dict[str, Parameter]:
    parameters = {}
    for name, entry in _mapping(raw, where).items():
        entry = _mapping(entry, f"{where} parameter {name!r}")
        parameters[name] = Parameter(
            value=_number(
                _required(entry, "value", f"{where} parameter {name!r}"), f"{where} parameter {name!r}"
            ),
            source=str(_required(entry, "source", f"{where} parameter {name!r}")),
        )
    return parameters


ParametersT = TypeVar("ParametersT")


def build_parameters(
    cls: type[ParametersT], section: dict[str, Parameter], where: str, positive: tuple[str, ...] = ()
) -> ParametersT:
    """The dataclass `cls` filled from a catalog parameter section; every field must be there, and no other.

    Whole-number fields must be positive whole numbers; the fields named in `positive` must be above zero.
    """
    fields = typing.get_type_hints(cls)
    missing = [name for name in fields if name not in section]
    if missing:
        raise UserError(f"{where} parameter {missing[0]!r} is missing")
    unknown = [name for name in section if name not in fields]
    if unknown:
        raise UserError(f"{where} parameter {unknown[0]!r} is unknown (known: {', '.join(fields)})")
    values: dict[str, float | int] = {}
    for name, hint in fields.items():
        label = f"{where} parameter {name!r}"
        value = section[name].value
        values[name] = (
            _count(value, label, positive=True) if hint is int else _number(value, label, name in positive)
        )
    return cls(**values)


def _known_item(item_id: str, items: dict[str, Item], where: str) -> None:
    if item_id not in items:
        raise UserError(f"{where}: unknown catalog item {item_id!r}")


def _required(raw: dict[str, Any], key: str, where: str) -> Any:
    if key not in raw or raw[key] is None:
        raise UserError(f"{where}: missing {key!r}")
    return raw[key]


def _mapping(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a mapping, got {type(raw).__name__}")
    return raw


def _number(raw: Any, where: str, positive: bool = False) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise UserError(f"{where} must be a number, got {raw!r}")
    if raw < 0 or (positive and raw == 0):
        raise UserError(f"{where} must be {'positive' if positive else 'non-negative'}, got {raw!r}")
    return raw


def _count(raw: Any, where: str, positive: bool = False) -> int:
    value = _number(raw, where, positive)
    if value != int(value):
        raise UserError(f"{where} must be a whole number, got {raw!r}")
    return int(value)
