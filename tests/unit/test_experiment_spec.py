"""Experiment specs: valid ones parse with inheritance between phases; every bad one fails naming its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitax.experiment.spec import SpecError, load_spec, parse_spec

REAL = {
    "name": "scale-identify",
    "mode": "real",
    "phases": [
        {"name": "baseline", "duration": "90s", "replicas": {"ingest-detect": 1, "identify": 2, "kafka": 3}},
        {"name": "more", "duration": 2, "replicas": {"identify": 4}},
    ],
}
EMULATED = {
    "name": "accel",
    "mode": "emulated",
    "phases": [
        {"name": "x1", "duration": "1m", "factor": 1,
         "replicas": {"emulate-producers": 1, "emulate-consumers": 2}, "instances": {"producers": 4}},
        {"name": "x8", "duration": "1m", "factor": 8},
    ],
}
BOUND = {"within": "250ms", "factors": [1, 16]}
NO_FACTOR = {**EMULATED, "phases": [EMULATED["phases"][0], {"name": "x8", "duration": "1m"}]}


def test_real_spec_inherits_replicas_between_phases() -> None:
    spec = parse_spec(REAL)
    assert [p.name for p in spec.phases] == ["baseline", "more"]
    assert spec.phases[0].duration_s == 90
    assert dict(spec.phases[1].replicas) == {"ingest-detect": 1, "identify": 4, "kafka": 3}
    assert spec.phases[1].changed == {"identify"}
    assert spec.stages == ("kafka", "identify", "ingest-detect")  # kafka, then consumers, then producers
    assert spec.release == "aitax" and spec.total_duration_s == 92


def test_emulated_spec_inherits_factor_and_instances() -> None:
    spec = parse_spec(EMULATED)
    assert spec.phases[1].factor == 8
    assert dict(spec.phases[1].instances) == {"producers": 4, "consumers": 1}
    assert dict(spec.phases[1].replicas) == {"emulate-producers": 1, "emulate-consumers": 2}
    assert spec.profile == "paper"


def test_a_phase_runs_a_closed_loop_or_searches_a_latency_bound_and_the_next_inherits_neither() -> None:
    phases = [*EMULATED["phases"], {"name": "closed", "duration": 30, "in_flight": 4},
              {"name": "bound", "duration": 30, "latency_bound": {**BOUND, "quantile": 0.999, "resolution": 1.2}},
              {"name": "after", "duration": 30}]
    closed, bound, after = parse_spec({**EMULATED, "phases": phases}).phases[2:]
    assert (closed.in_flight, closed.factor, closed.search) == (4, 8, None)
    assert bound.search is not None and bound.in_flight is None
    assert (bound.search.within_ms, bound.search.quantile, bound.search.lowest, bound.search.highest,
            bound.search.resolution) == (250, 0.999, 1, 16, 1.2)
    assert bound.factor == 1 and bound.search.describe() == "p99.9 within 250 ms, factors 1-16"
    assert (after.factor, after.in_flight, after.search) == (8, None, None)  # the factor before the search


def test_paths_are_relative_to_the_spec_file(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("name: a\nvideo: v.mp4\ngallery: /abs/g.npz\nphases:\n"
                    "  - {name: p, duration: 5m, replicas: {ingest-detect: 1, identify: 2}}\n")
    spec = load_spec(path)
    assert spec.video == tmp_path / "v.mp4" and spec.gallery == Path("/abs/g.npz")
    assert spec.phases[0].duration_s == 300


def _with_phase(base: dict, index: int, **changes) -> dict:
    phases = [dict(p) for p in base["phases"]]
    phases[index].update(changes)
    return {**base, "phases": phases}


@pytest.mark.parametrize(
    ("document", "field", "reason"),
    [
        ([], "top level", "expected a mapping"),
        ({**REAL, "phasez": []}, "phasez", "unknown field"),
        ({**REAL, "name": "Bad_Name"}, "name", "is not a name"),
        ({**REAL, "mode": "fast"}, "mode", "not one of real, emulated"),
        ({**REAL, "phases": []}, "phases", "non-empty list"),
        ({**REAL, "phases": ["x"]}, "phases[0]", "expected a mapping"),
        (_with_phase(REAL, 0, duration="soon"), "phases[0].duration", "not a duration"),
        (_with_phase(REAL, 0, duration=0), "phases[0].duration", "more than 0"),
        (_with_phase(REAL, 1, duration=None), "phases[1].duration", "missing"),
        (_with_phase(REAL, 1, name="baseline"), "phases[1].name", "unique"),
        (_with_phase(REAL, 0, replicas={"identfy": 2}), "phases[0].replicas.identfy", "unknown stage"),
        (_with_phase(REAL, 0, replicas={"emulate-producers": 2}), "phases[0].replicas.emulate-producers",
         "belongs to mode: emulated"),
        (_with_phase(REAL, 0, replicas={"identify": -1}), "phases[0].replicas.identify", "between 0 and"),
        (_with_phase(REAL, 0, replicas={"identify": "2"}), "phases[0].replicas.identify", "whole number"),
        (_with_phase(REAL, 0, replicas={"kafka": 2}), "phases[0].replicas.kafka", "between 3 and"),
        (_with_phase(REAL, 0, replicas=None), "phases[0].replicas", "first phase must give replicas"),
        (_with_phase(REAL, 1, factor=4), "phases[1].factor", "cannot be accelerated"),
        (_with_phase(REAL, 1, instances={"producers": 2}), "phases[1].instances", "only for mode: emulated"),
        (_with_phase(EMULATED, 1, factor=0), "phases[1].factor", "greater than 0"),
        (_with_phase(EMULATED, 1, factor=True), "phases[1].factor", "greater than 0"),
        (_with_phase(EMULATED, 0, instances={"producer": 2}), "phases[0].instances.producer", "unknown field"),
        (_with_phase(EMULATED, 0, instances={"producers": 0}), "phases[0].instances.producers", "between 1"),
        ({**EMULATED, "video": "v.mp4"}, "video", "only for mode: real"),
        ({**REAL, "profile": "paper"}, "profile", "only for mode: emulated"),
        (_with_phase(REAL, 1, in_flight=2), "phases[1].in_flight", "only for mode: emulated"),
        (_with_phase(EMULATED, 1, in_flight=0), "phases[1].in_flight", "greater than or equal to 1"),
        (_with_phase(REAL, 1, latency_bound=BOUND), "phases[1].latency_bound", "only for mode: emulated"),
        (_with_phase(EMULATED, 1, latency_bound=BOUND), "phases[1].factor", "give latency_bound.factors"),
        (_with_phase(NO_FACTOR, 1, in_flight=2, latency_bound=BOUND), "phases[1].latency_bound",
         "open loop"),
        (_with_phase(NO_FACTOR, 1, latency_bound={**BOUND, "factors": [16, 1]}),
         "phases[1].latency_bound.factors", "the lowest first"),
        (_with_phase(NO_FACTOR, 1, latency_bound={**BOUND, "factors": [1]}),
         "phases[1].latency_bound.factors", "at least 2 items"),
        (_with_phase(NO_FACTOR, 1, latency_bound={"factors": [1, 2]}), "phases[1].latency_bound.within",
         "missing"),
        (_with_phase(NO_FACTOR, 1, latency_bound={**BOUND, "within": "soon"}),
         "phases[1].latency_bound.within", "not a duration"),
        (_with_phase(NO_FACTOR, 1, latency_bound={**BOUND, "quantile": 1}),
         "phases[1].latency_bound.quantile", "less than 1"),
        (_with_phase(NO_FACTOR, 1, latency_bound={**BOUND, "p": 0.9}), "phases[1].latency_bound.p",
         "expected one of factors, quantile, resolution, within"),
        (_with_phase(NO_FACTOR, 1, latency_bound=[1, 2]), "phases[1].latency_bound",
         "a mapping like {within: 250ms"),
        ({**REAL, "release": "My Release"}, "release", "Helm release name"),
        ({**REAL, "namespace": "-x"}, "namespace", "namespace name"),
    ],
)
def test_bad_specs_name_the_field(document: object, field: str, reason: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_spec(document, source="spec.yaml")
    message = str(error.value)
    assert message.startswith(f"spec.yaml: {field}: "), message
    assert reason in message, message


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read the experiment spec"):
        load_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: a\nphases: [\n")
    with pytest.raises(SpecError, match=r"not valid YAML at line \d+"):
        load_spec(bad)


SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "experiment-spec.schema.json"


def test_the_shipped_json_schema_is_the_models() -> None:
    import json

    from aitax.experiment.spec import spec_json_schema

    assert json.loads(SCHEMA_FILE.read_text()) == spec_json_schema(), (
        "regenerate it: aitax experiment schema --out docs/experiment-spec.schema.json")


@pytest.mark.parametrize(
    "document",
    [REAL, EMULATED, *(pytest.param(path, id=path.name) for path in
                       sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "experiments").glob("*.yaml")))])
def test_an_editor_with_the_schema_accepts_every_valid_spec(document: dict | Path) -> None:
    import json

    import jsonschema
    import yaml

    if isinstance(document, Path):
        parse_spec(yaml.safe_load(document.read_text()), str(document))  # valid for `aitax experiment validate`
        document = yaml.safe_load(document.read_text())
    jsonschema.validate(document, json.loads(SCHEMA_FILE.read_text()))


@pytest.mark.parametrize("document", [
    {**REAL, "phasez": []}, {**REAL, "name": "Bad_Name"}, {**REAL, "mode": "fast"}, {**REAL, "phases": []},
    _with_phase(REAL, 0, duration="soon"), _with_phase(REAL, 0, replicas={"identify": "2"}),
    _with_phase(REAL, 0, replicas={"identfy": 2}), _with_phase(EMULATED, 1, factor=0),
    _with_phase(EMULATED, 0, instances={"producer": 2}), _with_phase(EMULATED, 1, in_flight=0),
    _with_phase(EMULATED, 1, latency_bound={**BOUND, "factors": [1]}),
    _with_phase(EMULATED, 1, latency_bound={**BOUND, "within": "soon"}),
])
def test_an_editor_with_the_schema_flags_a_misshapen_spec(document: dict) -> None:
    import json

    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, json.loads(SCHEMA_FILE.read_text()))


def test_a_phase_shapes_the_nodes_links_for_itself_and_the_phases_after() -> None:
    from aitax.cluster.links import LinkShape
    from aitax.experiment.spec import PhaseLinks

    spec = parse_spec({"name": "links", "mode": "emulated", "phases": [
        {"name": "open", "duration": 10, "replicas": {"emulate-producers": 1, "emulate-consumers": 1}},
        {"name": "gigabit", "duration": 10, "links": {"rate": "1gbit", "loss_percent": 0.1}},
        {"name": "still", "duration": 10},
        {"name": "brokers-slow", "duration": 10, "links": {"rate": "10mbit", "nodes": "brokers"}},
        {"name": "open-again", "duration": 10, "links": {"rate": "unshaped"}}]})
    gigabit = PhaseLinks(LinkShape(rate_mbit=1000.0, loss_percent=0.1))
    assert [phase.links for phase in spec.phases] == [
        None, gigabit, gigabit, PhaseLinks(LinkShape(rate_mbit=10.0), "brokers"), PhaseLinks(LinkShape())]
    assert spec.phases[3].links.describe() == "the brokers' nodes: 10 Mbit/s"


@pytest.mark.parametrize(("links", "message"), [
    ({}, r"phases\[0\]\.links: expected a mapping like \{rate: 1gbit, loss_percent: 0.1\}"),
    ({"rate": "fast"}, r"phases\[0\]\.links: link rate 'fast': give a number and kbit, mbit or gbit"),
    ({"rate": "unshaped", "loss_percent": 1}, r"phases\[0\]\.links: rate: unshaped removes all shaping"),
    ({"rate": "1gbit", "jitter_ms": 1}, r"phases\[0\]\.links\.jitter_ms"),
    ({"rate": "1gbit", "nodes": "kafka"}, r"phases\[0\]\.links\.nodes"),
])
def test_a_phase_links_that_are_not_a_shape_are_refused_by_field(links: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"name": "links", "mode": "emulated", "phases": [
            {"name": "p", "duration": 10, "replicas": {"emulate-producers": 1, "emulate-consumers": 1},
             "links": links}]})
