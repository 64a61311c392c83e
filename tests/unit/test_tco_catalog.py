"""Catalog loading: the paper's tables as data, and one-line errors that name the bad entry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from aitax.common.errors import UserError
from aitax.tco.catalog import CATALOG_DIR, load_catalog


def write_variant(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """The paper catalog with `change` applied, written to a file of its own."""
    raw = yaml.safe_load((CATALOG_DIR / "paper.yaml").read_text(encoding="utf-8"))
    change(raw)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def test_paper_catalog_holds_table_3_and_4_quantities() -> None:
    catalog = load_catalog("paper")
    homogeneous = catalog.designs["homogeneous"]
    purpose_built = catalog.designs["purpose-built"]

    assert homogeneous.node_group("node").count == 1024
    assert homogeneous.network_line("switch").count == 160
    assert homogeneous.network_line("link-cable").count == 3072
    assert purpose_built.node_group("compute").count == 867
    assert purpose_built.node_group("broker").count == 157
    assert purpose_built.node_group("broker").items["p4510-1tb"] == 4
    assert catalog.items["r740xd-broker"].price_usd == 11016
    assert catalog.items["mfa7a20-c010"].price_usd == 1165


def test_every_assumption_has_a_source() -> None:
    catalog = load_catalog("paper")

    for section in (catalog.cost, catalog.capacity):
        assert section
        assert all(parameter.source.strip() for parameter in section.values())


def test_catalog_by_path_loads_the_same_data(tmp_path: Path) -> None:
    path = write_variant(tmp_path, lambda raw: None)

    assert load_catalog(str(path)).designs == load_catalog("paper").designs


def test_unknown_catalog_name_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"unknown catalog 'nope'.*paper"):
        load_catalog("nope")


def test_unknown_item_in_a_design_names_design_group_and_item(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["designs"]["purpose-built"]["nodes"]["broker"]["items"]["optane-900p"] = 1

    with pytest.raises(
        UserError, match=r"designs.purpose-built.nodes.broker.items.optane-900p: unknown catalog item 'optane-900p'"
    ):
        load_catalog(str(write_variant(tmp_path, change)))


def test_unknown_item_in_network_is_named(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["designs"]["homogeneous"]["network"]["switch"]["item"] = "nexus-9k"

    with pytest.raises(UserError, match=r"designs.homogeneous.network.switch.item: unknown catalog item 'nexus-9k'"):
        load_catalog(str(write_variant(tmp_path, change)))


def test_negative_price_names_the_item(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["items"]["p4510-1tb"]["price_usd"] = -399

    with pytest.raises(
        UserError, match=r"variant.yaml: items.p4510-1tb.price_usd -399: input should be greater than or equal to 0"
    ):
        load_catalog(str(write_variant(tmp_path, change)))


def test_negative_count_names_the_group(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["designs"]["homogeneous"]["nodes"]["node"]["count"] = -1

    with pytest.raises(UserError, match=r"designs.homogeneous.nodes.node.count -1: input should be greater than or "):
        load_catalog(str(write_variant(tmp_path, change)))


def test_fractional_quantity_is_rejected(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["designs"]["purpose-built"]["network"]["interconnect"]["count"] = 1.5

    with pytest.raises(UserError, match=r"network.interconnect.count 1.5: input should be a valid int"):
        load_catalog(str(write_variant(tmp_path, change)))


def test_missing_price_names_the_field(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        del raw["items"]["mcx411a"]["price_usd"]

    with pytest.raises(UserError, match=r"items.mcx411a.price_usd: field required"):
        load_catalog(str(write_variant(tmp_path, change)))


def test_missing_design_is_named(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        del raw["designs"]["purpose-built"]

    with pytest.raises(UserError, match=r"designs.purpose-built: missing \(catalogs need homogeneous and "):
        load_catalog(str(write_variant(tmp_path, change)))


def test_design_missing_a_network_role_of_its_topology(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        del raw["designs"]["purpose-built"]["network"]["broker-splitter"]

    with pytest.raises(UserError, match=r"purpose-built.network: topology split-two-level-fat-tree needs network"):
        load_catalog(str(write_variant(tmp_path, change)))


def test_parameter_without_value_is_named(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        del raw["cost"]["electricity_usd_per_kwh"]["value"]

    with pytest.raises(UserError, match=r"cost.electricity_usd_per_kwh.value: field required"):
        load_catalog(str(write_variant(tmp_path, change)))


def test_unreadable_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("items: [unclosed\n", encoding="utf-8")

    with pytest.raises(UserError, match=r"broken.yaml: not valid YAML at line 2"):
        load_catalog(str(path))


SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "tco-catalog.schema.json"


def test_the_shipped_json_schema_is_the_models_and_an_editor_accepts_every_catalog() -> None:
    import json

    import jsonschema

    from aitax.tco.catalog import builtin_catalogs, catalog_json_schema

    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema == catalog_json_schema(), "regenerate it: aitax tco schema --out docs/tco-catalog.schema.json"
    for name in builtin_catalogs():
        jsonschema.validate(yaml.safe_load((CATALOG_DIR / f"{name}.yaml").read_text()), schema)


@pytest.mark.parametrize("change", [
    lambda raw: raw["items"]["p4510-1tb"].update(price_usd=-399),
    lambda raw: raw["items"]["p4510-1tb"].update(kind="gpu"),
    lambda raw: raw["designs"]["homogeneous"]["nodes"]["node"].update(count=1.5),
    lambda raw: raw["designs"]["homogeneous"].update(topology="ring"),
    lambda raw: raw.update(extra_section={}),
])
def test_an_editor_with_the_schema_flags_a_misshapen_catalog(change: Callable[[dict[str, Any]], None]) -> None:
    import json

    import jsonschema

    raw = yaml.safe_load((CATALOG_DIR / "paper.yaml").read_text(encoding="utf-8"))
    change(raw)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(raw, json.loads(SCHEMA_FILE.read_text()))


def test_a_whole_float_count_is_a_count_and_an_unknown_field_is_refused(tmp_path: Path) -> None:
    def whole(raw: dict[str, Any]) -> None:
        raw["designs"]["homogeneous"]["nodes"]["node"]["count"] = 1024.0

    assert load_catalog(str(write_variant(tmp_path, whole))).designs["homogeneous"].node_group("node").count == 1024

    def typo(raw: dict[str, Any]) -> None:
        raw["itmes"] = {}

    with pytest.raises(UserError, match=r"variant.yaml: itmes \{\}: extra inputs are not permitted"):
        load_catalog(str(write_variant(tmp_path, typo)))
