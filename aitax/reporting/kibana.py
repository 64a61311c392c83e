"""Kibana saved objects: import the shipped dashboard, and list the event fields it reads.

The dashboard lives in `aitax/reporting/dashboards/kibana.ndjson` (data view, Lens visualizations, dashboard), the
format Kibana's `_export` writes. `referenced_fields` lets tests hold it to `telemetry.events.INDEX_MAPPING`,
since Kibana itself cannot run here.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from aitax.common.errors import UserError

DEFAULT_NDJSON = Path(__file__).parent / "dashboards" / "kibana.ndjson"
DEFAULT_GRAFANA = Path(__file__).parent / "dashboards" / "grafana.json"
DASHBOARD_ID = "aitax-dashboard"
API_KEY_ENV = "KIBANA_API_KEY"
# Lens's pseudo-field for "count of records": not an index field.
_LENS_RECORDS_FIELD = "___records___"
# Quoted KQL values are dropped before looking for `field :` / `field >=` so a value never reads as a field.
_KQL_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_KQL_FIELD = re.compile(r"([A-Za-z_@][\w.@]*)\s*(?::|[<>]=?)")
_PAINLESS_DOC_FIELD = re.compile(r"doc\[['\"]([^'\"]+)['\"]\]")
_SPACE_ID = re.compile(r"[a-z0-9_-]+")  # what Kibana accepts as a space id


def read_saved_objects(ndjson_path: Path | str) -> list[dict[str, Any]]:
    """The saved objects in an export, without the trailing export summary line."""
    lines = Path(ndjson_path).read_text().splitlines()
    objects = [json.loads(line) for line in lines if line.strip()]
    return [obj for obj in objects if "exportedCount" not in obj]


def runtime_fields(ndjson_path: Path | str) -> set[str]:
    """Runtime fields the data views define (computed at query time, absent from the index mapping)."""
    return {
        name
        for obj in read_saved_objects(ndjson_path)
        if obj["type"] == "index-pattern"
        for name in json.loads(obj["attributes"].get("runtimeFieldMap") or "{}")
    }


def referenced_fields(ndjson_path: Path | str) -> set[str]:
    """Every event field the saved objects read: Lens columns, KQL queries and filters, controls, scripts.

    Raises ValueError for a saved object type it cannot read, so a new kind of object cannot slip past the
    field check unread.
    """
    readers = {"index-pattern": _data_view_fields, "lens": _lens_fields, "dashboard": _dashboard_fields}
    fields: set[str] = set()
    for obj in read_saved_objects(ndjson_path):
        reader = readers.get(obj["type"])
        if reader is None:
            raise ValueError(f"cannot read the fields of saved object {obj['type']} {obj['id']}")
        fields |= reader(obj["attributes"])
    return fields


def _kql_fields(query: str) -> set[str]:
    return set(_KQL_FIELD.findall(_KQL_QUOTED.sub('""', query)))


def _data_view_fields(attributes: dict[str, Any]) -> set[str]:
    fields = {attributes["timeFieldName"]} if attributes.get("timeFieldName") else set()
    for runtime_field in json.loads(attributes.get("runtimeFieldMap") or "{}").values():
        fields |= set(_PAINLESS_DOC_FIELD.findall(runtime_field.get("script", {}).get("source", "")))
    return fields


def _lens_fields(attributes: dict[str, Any]) -> set[str]:
    state = attributes["state"]
    fields = _kql_fields(state.get("query", {}).get("query", ""))
    for pinned_filter in state.get("filters", []):
        fields |= {pinned_filter["meta"]["key"]} if pinned_filter.get("meta", {}).get("key") else set()
    for layer in state["datasourceStates"].get("formBased", {}).get("layers", {}).values():
        for column in layer["columns"].values():
            if column.get("sourceField") and column["sourceField"] != _LENS_RECORDS_FIELD:
                fields.add(column["sourceField"])
            fields |= _kql_fields(column.get("filter", {}).get("query", ""))
            for bucket_filter in column.get("params", {}).get("filters", []):
                fields |= _kql_fields(bucket_filter["input"]["query"])
    return fields


def _dashboard_fields(attributes: dict[str, Any]) -> set[str]:
    search_source = json.loads(attributes.get("kibanaSavedObjectMeta", {}).get("searchSourceJSON") or "{}")
    fields = _kql_fields(search_source.get("query", {}).get("query", ""))
    controls = json.loads(attributes.get("controlGroupInput", {}).get("panelsJSON") or "{}")
    return fields | {control["explicitInput"]["fieldName"] for control in controls.values()}


def import_saved_objects(
    url: str,
    ndjson_path: Path | str = DEFAULT_NDJSON,
    space: str | None = None,
    overwrite: bool = True,
    api_key: str | None = None,
) -> int:
    """POST the NDJSON to Kibana's saved objects import API; returns how many objects it imported.

    The API key defaults to $KIBANA_API_KEY. Every failure is a one-line UserError.
    """
    import requests

    path = Path(ndjson_path)
    if not path.is_file():
        raise UserError(f"no saved objects file at {path}")
    if space is not None and not _SPACE_ID.fullmatch(space):
        raise UserError(f"bad Kibana space id {space!r}: lowercase letters, digits, '_' and '-' only")
    endpoint = f"{kibana_base(url, space)}/api/saved_objects/_import"
    headers = {"kbn-xsrf": "true"}
    api_key = api_key or os.environ.get(API_KEY_ENV)
    if api_key:
        headers["Authorization"] = f"ApiKey {api_key}"
    try:
        with path.open("rb") as ndjson:
            response = requests.post(
                endpoint,
                params={"overwrite": "true"} if overwrite else None,
                headers=headers,
                files={"file": (path.name, ndjson, "application/ndjson")},
                timeout=60,
            )
    except requests.RequestException as error:
        raise UserError(f"cannot reach Kibana at {url}: {_one_line_reason(error)}") from error
    if not response.ok:
        raise UserError(f"Kibana refused the import ({response.status_code}): {_kibana_message(response)}")
    try:
        answer = response.json()
    except ValueError as error:
        raise UserError(f"Kibana at {url} answered the import with something other than JSON") from error
    if not answer.get("success"):
        errors = answer.get("errors") or [{}]
        raise UserError(
            f"Kibana imported {answer.get('successCount', 0)} objects, {len(errors)} failed; first: "
            f"{_describe_import_error(errors[0])}"
        )
    return int(answer.get("successCount", 0))


def kibana_base(url: str, space: str | None) -> str:
    """Kibana's base URL for a space: the default space has no `/s/<space>` prefix."""
    base = url.rstrip("/")
    return f"{base}/s/{space}" if space and space != "default" else base


def _one_line_reason(error: Exception) -> str:
    # requests nests the OS error deep in a long message; "[Errno 111] Connection refused" is the useful part.
    text = str(error)
    errno = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    return errno.group(0).strip() if errno else (text.splitlines() or [type(error).__name__])[0]


def _kibana_message(response: Any) -> str:
    try:
        message = response.json().get("message")
    except ValueError:
        message = None
    return " ".join(str(message or response.text or response.reason).split())[:300]


def _describe_import_error(error: dict[str, Any]) -> str:
    title = error.get("meta", {}).get("title") or error.get("title") or ""
    kind = error.get("error", {}).get("type", "unknown error")
    missing = [f"{ref['type']} {ref['id']}" for ref in error.get("error", {}).get("references", [])]
    detail = f"{kind}: missing {', '.join(missing)}" if missing else kind
    named = f"{error.get('type', 'object')} {error.get('id', '?')}" + (f' "{title}"' if title else "")
    return " ".join(f"{named} ({detail})".split())
