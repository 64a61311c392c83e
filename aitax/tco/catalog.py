"""Catalogs as data: a price list, the designs built from it, and the named assumptions of the models.

A catalog is a YAML file (see `aitax/tco/catalogs/paper.yaml` for the format). `load_catalog("paper")` reads a
built-in one, `load_catalog("path/to/file.yaml")` any other. Loading validates everything once, so the models
can trust the data: a bad entry raises `UserError` naming the file, the entry and the field.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from aitax.common.errors import UserError
from aitax.common.model_files import read_model
from aitax.tco.topology import TOPOLOGIES

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
    return _catalog(path, read_model(path, CatalogFile, "catalog"))


def _not_bool_or_text(value: Any) -> Any:
    """A YAML number only: `true` or "3" in a price is a mistake, not a 1 or a 3."""
    if isinstance(value, bool | str):
        raise ValueError(f"{value!r}: expected a number")
    return value


NonNegative = Annotated[float, Field(ge=0), BeforeValidator(_not_bool_or_text)]
Positive = Annotated[float, Field(gt=0), BeforeValidator(_not_bool_or_text)]
Count = Annotated[int, Field(ge=0), BeforeValidator(_not_bool_or_text)]  # 2.0 is 2; 1.5 is refused
Text = Annotated[str, BeforeValidator(lambda value: value if value is None else str(value))]


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ItemFile(_File):
    name: Text
    kind: Literal[ITEM_KINDS]  # type: ignore[valid-type]
    price_usd: NonNegative
    rated_watts: NonNegative = 0.0
    gbps: Positive | None = None  # NICs and switches
    ports: Annotated[int, Field(gt=0), BeforeValidator(_not_bool_or_text)] | None = None  # switches

    @model_validator(mode="after")
    def _fabric_figures(self) -> ItemFile:
        if self.kind == "switch" and (self.ports is None or self.gbps is None):
            raise ValueError("a switch needs 'ports' and 'gbps'")
        if self.kind == "nic" and self.gbps is None:
            raise ValueError("a nic needs 'gbps'")
        return self


class NodeGroupFile(_File):
    count: Count
    items: dict[str, Count]  # item id -> quantity per node


class NetworkLineFile(_File):
    item: str
    count: Count


class DesignFile(_File):
    description: Text = ""
    topology: Literal[tuple(TOPOLOGIES)]  # type: ignore[valid-type]
    nodes: dict[str, NodeGroupFile]  # by the roles of the topology's node groups
    network: dict[str, NetworkLineFile]  # by the topology's network roles
    reported: dict[Literal[REPORTED_FIELDS], NonNegative] = Field(default_factory=dict)  # type: ignore[valid-type]


class ParameterFile(_File):
    value: NonNegative
    source: str  # where the value comes from, or how it was calibrated


class CatalogFile(_File):
    """A catalog YAML file as written (aitax/tco/catalogs/paper.yaml); `aitax tco schema` prints its JSON Schema."""

    name: Text | None = None
    description: Text = ""
    items: dict[str, ItemFile]
    designs: dict[str, DesignFile]
    cost: dict[str, ParameterFile]
    capacity: dict[str, ParameterFile]
    reported_saving_percent: NonNegative | None = None
    notes: list[str] = Field(default_factory=list)  # printed by `aitax tco compare`


def catalog_json_schema() -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **CatalogFile.model_json_schema(),
            "title": "aitax TCO catalog"}


def _catalog(path: Path, raw: CatalogFile) -> Catalog:
    """The rules between entries (every design the models compare, the roles its topology needs, items that
    exist, one server per node) on a catalog whose shape the model checked."""
    where = path.name
    for name in DESIGN_NAMES:
        if name not in raw.designs:
            raise UserError(f"{where}: designs.{name}: missing (catalogs need {' and '.join(DESIGN_NAMES)})")
    items = {item_id: Item(id=item_id, name=item.name, kind=item.kind, price_usd=item.price_usd,
                           rated_watts=item.rated_watts, gbps=item.gbps or 0.0, ports=item.ports or 0)
             for item_id, item in raw.items.items()}
    return Catalog(
        name=raw.name or path.stem,
        path=path,
        description=raw.description,
        items=items,
        designs={name: _design(name, design, items, f"{where}: designs.{name}")
                 for name, design in raw.designs.items()},
        cost={name: Parameter(p.value, p.source) for name, p in raw.cost.items()},
        capacity={name: Parameter(p.value, p.source) for name, p in raw.capacity.items()},
        reported_saving_percent=raw.reported_saving_percent,
        notes=tuple(" ".join(note.split()) for note in raw.notes),
    )


def _design(name: str, raw: DesignFile, items: dict[str, Item], where: str) -> Design:
    topology = TOPOLOGIES[raw.topology]
    if set(raw.nodes) != set(topology.node_roles):
        raise UserError(f"{where}.nodes: topology {topology.name} needs node groups {', '.join(topology.node_roles)}")
    if set(raw.network) != set(topology.network_roles):
        raise UserError(f"{where}.network: topology {topology.name} needs network roles "
                        f"{', '.join(topology.network_roles)}")
    for role, group in raw.nodes.items():
        for item_id in group.items:
            _known_item(item_id, items, f"{where}.nodes.{role}.items.{item_id}")
        servers = [item_id for item_id in group.items if items[item_id].kind == "server"]
        if len(servers) != 1 or group.items[servers[0]] != 1:
            raise UserError(f"{where}.nodes.{role}.items: a node needs exactly one server item with quantity 1")
    for role, line in raw.network.items():
        _known_item(line.item, items, f"{where}.network.{role}.item")
    return Design(
        name=name,
        description=raw.description,
        topology=topology.name,
        nodes=tuple(NodeGroup(role, group.count, dict(group.items)) for role, group in raw.nodes.items()),
        network=tuple(NetworkLine(role, line.item, line.count) for role, line in raw.network.items()),
        reported=dict(raw.reported),
    )


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
