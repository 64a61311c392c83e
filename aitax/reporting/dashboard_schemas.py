"""The shipped Grafana dashboard and Kibana saved objects, checked against their owners' own definitions.

Grafana: its published TypeScript types (npm `@grafana/schema`, pinned in scripts/dashboard-schemas) turned into JSON
Schema by `scripts/install-dashboard-schemas.sh`: the `Dashboard` kind, and each panel plugin's `Options` and
`FieldConfig`. A panel's options are partial in a saved dashboard (Grafana fills in its plugin's defaults), so a
panel schema's `required` lists are dropped; unknown keys and wrong types or values still fail.

Kibana: neither Kibana nor its source can be installed from the registries this project uses, so `KIBANA_RULES`
states, in this project's words, what Kibana 8.19's saved-objects import enforces for the three types the export
holds, as read in elastic/kibana's source (files named beside each rule). Each error names the object and field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

from aitax.common.errors import UserError
from aitax.common.paths import aitax_home

# Keys of Grafana's "export for sharing externally" wrapper, which its import consumes before the dashboard model.
GRAFANA_EXPORT_KEYS = ("__inputs", "__elements", "__requires")
SEMVER = re.compile(r"^\d+\.\d+\.\d+$")


def grafana_schema_dir() -> Path:
    return aitax_home() / "tools" / "dashboard-schemas" / "grafana"


def _errors(validator: Draft7Validator, instance: Any, where: str) -> list[str]:
    found = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
        while error.context:  # within an anyOf (a panel or a row?), the branch that got furthest into the instance
            error = max(error.context, key=lambda e: len(e.absolute_path))
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        found.append(f"{where}{path}: {error.message}")
    return found


def _without_required(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {key: _without_required(value) for key, value in schema.items() if key != "required"}
    if isinstance(schema, list):
        return [_without_required(item) for item in schema]
    return schema


def check_grafana(dashboard: dict[str, Any], schemas: Path | None = None) -> list[str]:
    """Each way `dashboard` (a Grafana export) departs from Grafana's schema, as 'path: what is wrong'."""
    schemas = schemas or grafana_schema_dir()
    if not (schemas / "dashboard.schema.json").is_file():
        raise FileNotFoundError(f"{schemas}: no Grafana schemas (`make setup-schemas` makes them)")
    model = {key: value for key, value in dashboard.items() if key not in GRAFANA_EXPORT_KEYS}
    errors = _errors(Draft7Validator(json.loads((schemas / "dashboard.schema.json").read_text())), model, "dashboard")
    for index, panel in enumerate(dashboard.get("panels") or []):
        kind, where = panel.get("type"), f"dashboard.panels[{index}]"
        if kind == "row":
            continue
        options = schemas / f"panel-{kind}.options.schema.json"
        if not options.is_file():
            errors.append(f"{where}.type: no published schema for panel type {kind!r}")
            continue
        panel_schema = _without_required(json.loads(options.read_text()))
        errors += _errors(Draft7Validator(panel_schema), panel.get("options") or {}, f"{where}.options")
        field_config = schemas / f"panel-{kind}.fieldconfig.schema.json"
        custom = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("custom")
        if custom is not None and field_config.is_file():
            custom_schema = _without_required(json.loads(field_config.read_text()))
            errors += _errors(Draft7Validator(custom_schema), custom, f"{where}.fieldConfig.defaults.custom")
    return errors


# -- Kibana 8.19 ---------------------------------------------------------------------------------------------------

_STRING, _NUMBER, _BOOLEAN = {"type": "string"}, {"type": "number"}, {"type": "boolean"}
_REFERENCE = {"type": "object", "additionalProperties": False, "required": ["name", "type", "id"],
              "properties": {"name": _STRING, "type": _STRING, "id": _STRING}}
# The import's base document (core saved-objects `schema.ts`): unknown top-level keys are dropped, not refused, so
# only the known ones are typed; a reference with an extra key is refused.
KIBANA_OBJECT = {
    "type": "object", "required": ["id", "type", "attributes"],
    "properties": {"id": _STRING, "type": {"enum": ["index-pattern", "lens", "dashboard"]},
                   "attributes": {"type": "object"}, "references": {"type": "array", "items": _REFERENCE},
                   "managed": _BOOLEAN, "originId": _STRING,
                   "coreMigrationVersion": {"type": "string", "pattern": SEMVER.pattern},
                   "typeMigrationVersion": {"type": "string", "pattern": SEMVER.pattern},
                   "migrationVersion": {"type": "object", "additionalProperties": _STRING}},
}
KIBANA_RULES: dict[str, dict[str, Any]] = {
    # src/platform/plugins/shared/data_views/server/saved_objects/data_views.ts: no attribute schema; its
    # migrations end at 7.11.0 and its namespace conversion at 8.0.0. `title` is what the type is found by.
    "index-pattern": {
        "latest": "8.0.0",
        "attributes": {"type": "object", "required": ["title"],
                       "properties": {"title": _STRING, "timeFieldName": _STRING, "fields": _STRING,
                                      "runtimeFieldMap": _STRING, "fieldFormatMap": _STRING, "fieldAttrs": _STRING,
                                      "sourceFilters": _STRING, "typeMeta": _STRING, "name": _STRING,
                                      "type": _STRING, "allowNoIndex": _BOOLEAN, "allowHidden": _BOOLEAN}},
    },
    # x-pack/platform/plugins/shared/lens/server/saved_objects.ts: no attribute schema in 8.19; migrations to 8.9.0.
    # The later model version's `title: string` (required) is held to here too, as every Lens object has one.
    "lens": {
        "latest": "8.9.0",
        "attributes": {"type": "object", "required": ["title", "state"],
                       "properties": {"title": _STRING, "description": {"type": ["string", "null"]},
                                      "visualizationType": {"type": ["string", "null"]}, "state": {"type": "object"}}},
    },
    # src/platform/plugins/shared/dashboard/server/dashboard_saved_object/schema/v1..v3: model version 3
    # (virtual version 10.3.0) in 8.19; unknown attributes ignored, nested objects refuse unknown keys.
    "dashboard": {
        "latest": "10.3.0",
        "attributes": {
            "type": "object", "required": ["title"],
            "properties": {
                "title": _STRING, "description": _STRING, "timeRestore": _BOOLEAN, "timeFrom": _STRING,
                "timeTo": _STRING, "panelsJSON": _STRING, "optionsJSON": _STRING, "hits": _NUMBER,
                "version": _NUMBER,
                "kibanaSavedObjectMeta": {"type": "object", "additionalProperties": False,
                                          "properties": {"searchSourceJSON": _STRING}},
                "refreshInterval": {"type": "object", "additionalProperties": False, "required": ["pause", "value"],
                                    "properties": {"pause": _BOOLEAN, "value": _NUMBER, "display": _STRING,
                                                   "section": _NUMBER}},
                "controlGroupInput": {"type": "object",
                                      "properties": {"panelsJSON": _STRING, "controlStyle": _STRING,
                                                     "chainingSystem": _STRING,
                                                     "ignoreParentSettingsJSON": _STRING,
                                                     "showApplySelections": _BOOLEAN}},
                "sections": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False, "required": ["title", "gridData"],
                    "properties": {"title": _STRING, "collapsed": _BOOLEAN,
                                   "gridData": {"type": "object", "additionalProperties": False,
                                                "required": ["y", "i"], "properties": {"y": _NUMBER, "i": _STRING}}}}},
            },
        },
    },
}
# One panel of a dashboard's panelsJSON, as its migrations and its loading read it (schema/v2/types.ts).
KIBANA_PANEL = {
    "type": "object", "required": ["panelIndex", "gridData", "type", "embeddableConfig"],
    "properties": {"panelIndex": _STRING, "type": _STRING, "embeddableConfig": {"type": "object"},
                   "panelRefName": _STRING, "title": _STRING, "id": _STRING, "version": _STRING,
                   "gridData": {"type": "object", "required": ["x", "y", "w", "h", "i"],
                                "properties": {"x": _NUMBER, "y": _NUMBER, "w": _NUMBER, "h": _NUMBER, "i": _STRING,
                                               "sectionId": _STRING}}},
}
# core's pipelines/utils.ts: a coreMigrationVersion newer than the running Kibana is refused; 8.8.0 is the newest
# core transform.
KIBANA_VERSION = "8.19.0"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def check_kibana(objects: list[dict[str, Any]]) -> list[str]:
    """Each way the saved objects (an export's lines, without its summary) would be refused or broken by Kibana 8.19's
    import, as 'type id path: what is wrong'."""
    errors: list[str] = []
    base = Draft7Validator(KIBANA_OBJECT)
    present = {(obj.get("type"), obj.get("id")) for obj in objects}
    seen: set[tuple[Any, Any]] = set()
    for line, obj in enumerate(objects, 1):
        where = f"line {line} ({obj.get('type')} {obj.get('id')})"
        found = _errors(base, obj, where)
        errors += found
        if found:
            continue
        key = (obj["type"], obj["id"])
        if key in seen:
            errors.append(f"{where}: duplicate {obj['type']}:{obj['id']} (the whole import is refused)")
        seen.add(key)
        rules = KIBANA_RULES[obj["type"]]
        errors += _errors(Draft7Validator(rules["attributes"]), obj["attributes"], f"{where}.attributes")
        version = obj.get("typeMigrationVersion") or (obj.get("migrationVersion") or {}).get(obj["type"])
        if version and SEMVER.match(version) and _version(version) > _version(rules["latest"]):
            errors.append(f"{where}.typeMigrationVersion: {version} is newer than Kibana 8.19's {rules['latest']} "
                          "(the whole import is refused)")
        core = obj.get("coreMigrationVersion")
        if core and _version(core) > _version(KIBANA_VERSION):
            errors.append(f"{where}.coreMigrationVersion: {core} is newer than Kibana {KIBANA_VERSION}")
        for reference in obj.get("references") or []:
            if reference["type"] == "index-pattern" and ("index-pattern", reference["id"]) not in present:
                errors.append(f"{where}.references: data view {reference['id']!r} is not in the file "
                              "(missing_references unless the target Kibana has it)")
        if obj["type"] == "dashboard":
            errors += _dashboard_panels(obj, where)
    return errors


def _dashboard_panels(dashboard: dict[str, Any], where: str) -> list[str]:
    """panelsJSON parses to panels of KIBANA_PANEL's shape, and each panel by reference finds its reference: the
    name `<panelIndex>:<panelRefName>` (or, with no reference of that prefix, `panelRefName` among all)."""
    try:
        panels = json.loads(dashboard["attributes"].get("panelsJSON") or "[]")
    except json.JSONDecodeError as error:
        return [f"{where}.attributes.panelsJSON: not JSON ({error.msg})"]
    if not isinstance(panels, list):
        return [f"{where}.attributes.panelsJSON: not a list of panels"]
    errors, validator = [], Draft7Validator(KIBANA_PANEL)
    names = [r["name"] for r in dashboard.get("references") or []]
    for index, panel in enumerate(panels):
        at = f"{where}.attributes.panelsJSON[{index}]"
        found = _errors(validator, panel, at)
        errors += found
        if found or "panelRefName" not in panel:
            continue
        prefix = f"{panel['panelIndex']}:"
        candidates = [n[len(prefix):] for n in names if n.startswith(prefix)] or names
        if panel["panelRefName"] not in candidates:
            errors.append(f"{at}.panelRefName: {panel['panelRefName']!r} has no reference "
                          f"(Kibana: Could not find reference \"{panel['panelRefName']}\")")
    return errors


def check_file(path: Path, owner: str) -> tuple[list[str], str]:
    """A dashboard file checked against its owner's definitions ("grafana" or "kibana"): its errors, and what passed
    when there are none. An unreadable file is a UserError."""
    from aitax.reporting.kibana import read_saved_objects

    try:
        if owner == "kibana":
            objects = read_saved_objects(path)
            if not all(isinstance(obj, dict) for obj in objects):
                raise ValueError("a line is not a JSON object")
            return check_kibana(objects), f"{len(objects)} saved objects pass Kibana {KIBANA_VERSION}'s import rules"
        document = json.loads(path.read_text())
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        errors = check_grafana(document)
        version = (grafana_schema_dir() / "VERSION").read_text().strip()
    except FileNotFoundError as error:
        raise UserError(str(error)) from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserError(f"{path}: not a {owner} export ({error})") from None
    return errors, f"{len(document.get('panels') or [])} panels pass Grafana's schema (@grafana/schema {version})"
