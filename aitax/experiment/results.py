"""Phase results from Elasticsearch: events per stage, compute-time percentiles and throughput of one run id.

Uses only what every supported Elasticsearch has (terms, percentiles, stats; no scripts), over plain HTTP so
the same code reads an external cluster, the bundled lab node, or the local stack's.
"""

from __future__ import annotations

import json

from aitax.common.errors import UserError
from aitax.runs.results import StageSummary
from aitax.telemetry.elastic_access import http_options, redacted, refusal, usable_url
from aitax.telemetry.events import INDEX_PREFIX

PERCENTILES = (50.0, 90.0, 99.0)


def check_elasticsearch(url: str, timeout_s: float = 5.0) -> None:
    """Fail with one line before an experiment starts when its Elasticsearch cannot be read."""
    import requests

    url = usable_url(url)
    try:
        response = requests.get(f"{url}/_cluster/health", timeout=timeout_s, **http_options())
    except requests.RequestException as error:
        raise UserError(f"Elasticsearch at {redacted(url)} unreachable: {type(error).__name__}") from None
    if not response.ok:
        raise UserError(refusal(url, response.status_code) or
                        f"Elasticsearch at {redacted(url)} answered {response.status_code} to /_cluster/health")


def stage_summaries(url: str, run_id: str, timeout_s: float = 30.0) -> dict[str, StageSummary]:
    """Per stage of `run_id`: event count, compute-time percentiles and events per second of wall time."""
    import requests

    query = {
        "size": 0,
        "query": {"term": {"run_id": run_id}},
        "aggs": {
            "stages": {
                "terms": {"field": "stage", "size": 20},
                "aggs": {
                    "compute": {"percentiles": {"field": "compute_time_ms", "percents": list(PERCENTILES)}},
                    "wall": {"stats": {"field": "wall_start_ns"}},
                },
            }
        },
    }
    endpoint = f"{url.rstrip('/')}/{INDEX_PREFIX}-*/_search"
    try:
        response = requests.post(endpoint, data=json.dumps(query), timeout=timeout_s,
                                 headers={"Content-Type": "application/json"},
                                 params={"ignore_unavailable": "true", "allow_no_indices": "true"}, **http_options())
    except requests.RequestException as error:
        raise UserError(f"Elasticsearch at {redacted(url)} unreachable while collecting {run_id}: "
                        f"{type(error).__name__}") from None
    if not response.ok:
        raise UserError(refusal(url, response.status_code) or
                        f"Elasticsearch refused the results query ({response.status_code}): {response.text[:200]}")
    summaries = {}
    for bucket in response.json().get("aggregations", {}).get("stages", {}).get("buckets", []):
        values = bucket["compute"]["values"]
        wall = bucket["wall"]
        span_s = ((wall["max"] or 0) - (wall["min"] or 0)) / 1e9
        summaries[bucket["key"]] = StageSummary(
            events=int(bucket["doc_count"]),
            compute_ms={f"p{p:g}": round(values.get(f"{p:.1f}") or 0.0, 3) for p in PERCENTILES},
            events_per_s=round(bucket["doc_count"] / span_s, 3) if span_s > 0 else None,
        )
    return summaries
