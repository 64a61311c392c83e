"""The shipped dashboard files against their owners' definitions: Grafana's published schema (@grafana/schema,
made into JSON Schema by `make setup-schemas`) and Kibana 8.19's import rules. Each check must be able to fail:
one broken field, and the check names it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from aitax.cli import main
from aitax.reporting.dashboard_schemas import check_grafana, check_kibana
from aitax.reporting.kibana import DEFAULT_GRAFANA, DEFAULT_NDJSON, read_saved_objects


@pytest.fixture(scope="module")
def grafana() -> dict[str, Any]:
    return json.loads(DEFAULT_GRAFANA.read_text())


@pytest.fixture(scope="module")
def kibana() -> list[dict[str, Any]]:
    return read_saved_objects(DEFAULT_NDJSON)


def broken(document: Any, path: tuple, value: Any) -> Any:
    """`document` with the field at `path` set to `value`."""
    copied = copy.deepcopy(document)
    target = copied
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copied


def test_the_shipped_grafana_dashboard_passes_grafanas_schema(grafana: dict[str, Any]) -> None:
    assert check_grafana(grafana) == []


@pytest.mark.parametrize(("path", "value", "named"), [
    (("graphTooltip",), 5, "dashboard.graphTooltip: 5 is not one of"),
    (("panelz",), [], "dashboard: Additional properties are not allowed ('panelz' was unexpected)"),
    (("panels", 3, "gridPos", "w"), "wide", "dashboard.panels[3].gridPos.w: 'wide' is not of type 'number'"),
    (("panels", 1, "options", "legend", "displayMode"), "sideways", "dashboard.panels[1].options.legend.displayMode"),
    (("panels", 0, "options", "orientation"), "diagonal", "dashboard.panels[0].options.orientation"),
    (("panels", 2, "options", "legned"), {}, "dashboard.panels[2].options: Additional properties"),
    (("panels", 4, "type"), "nosuchviz", "dashboard.panels[4].type: no published schema for panel type 'nosuchviz'"),
])
def test_a_broken_grafana_field_is_named(grafana: dict[str, Any], path: tuple, value: Any, named: str) -> None:
    errors = check_grafana(broken(grafana, path, value))
    assert len(errors) >= 1 and any(error.startswith(named) for error in errors), errors


def test_the_shipped_kibana_objects_pass_kibanas_import_rules(kibana: list[dict[str, Any]]) -> None:
    assert check_kibana(kibana) == []


def _index(objects: list[dict[str, Any]], kind: str) -> int:
    return next(i for i, obj in enumerate(objects) if obj["type"] == kind)


@pytest.mark.parametrize(("kind", "path", "value", "named"), [
    ("dashboard", ("attributes", "refreshInterval"), {"pause": True}, ".attributes.refreshInterval: 'value' is a "
                                                                       "required property"),
    ("dashboard", ("attributes", "timeRestore"), "yes", ".attributes.timeRestore: 'yes' is not of type 'boolean'"),
    ("dashboard", ("attributes", "kibanaSavedObjectMeta", "query"), "x", ".attributes.kibanaSavedObjectMeta: "
                                                                         "Additional properties"),
    ("dashboard", ("typeMigrationVersion",), "10.4.0", ".typeMigrationVersion: 10.4.0 is newer than Kibana 8.19's "
                                                       "10.3.0"),
    ("dashboard", ("attributes", "panelsJSON"), "[{", ".attributes.panelsJSON: not JSON"),
    ("dashboard", ("references", 0, "name"), "nothing:panel_x", ".attributes.panelsJSON[0].panelRefName: "
                                                                "'panel_fig6-breakdown' has no reference"),
    ("lens", ("attributes", "title"), 7, ".attributes.title: 7 is not of type 'string'"),
    ("lens", ("typeMigrationVersion",), "10.1.0", ".typeMigrationVersion: 10.1.0 is newer than Kibana 8.19's 8.9.0"),
    ("lens", ("references", 0, "kind"), "x", ".references[0]: Additional properties"),
    ("index-pattern", ("attributes", "allowNoIndex"), "true", ".attributes.allowNoIndex: 'true' is not of type"),
    ("index-pattern", ("coreMigrationVersion",), "8.x", ".coreMigrationVersion: '8.x' does not match"),
])
def test_a_broken_kibana_field_is_named(kibana: list[dict[str, Any]], kind: str, path: tuple, value: Any,
                                        named: str) -> None:
    index = _index(kibana, kind)
    errors = check_kibana(broken(kibana, (index, *path), value))
    own = f"line {index + 1} ({kind} {kibana[index]['id']})"
    assert any(error.startswith(own + named) for error in errors), errors


def test_a_data_view_missing_from_the_file_is_named(kibana: list[dict[str, Any]]) -> None:
    without = [obj for obj in kibana if obj["type"] != "index-pattern"]
    errors = check_kibana(without)
    assert errors and all("data view 'aitax-dataview' is not in the file" in error for error in errors)


def test_the_check_commands_exit_1_and_name_the_field(grafana: dict[str, Any], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grafana", "check"]) == 0
    assert main(["kibana", "check"]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken(grafana, ("refresh",), 10)))
    assert main(["grafana", "check", "--file", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}: dashboard.refresh: 10 is not of type" in out and f"{bad}: 1 error(s)" in out
