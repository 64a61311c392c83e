"""Experiment specs: YAML files of phases, each with replicas per stage, an acceleration factor and a duration.

    name: scale-identify
    mode: real                 # real (ingest-detect + identify) or emulated (emulate-producers/-consumers)
    release: aitax             # kubernetes backend: the Helm release whose workloads are scaled
    namespace: aitax           # kubernetes backend (default: the kubeconfig context's namespace)
    video: demo/video.mp4      # local backend, mode real
    gallery: demo/gallery.npz  # local backend, mode real
    profile: paper             # mode emulated: a built-in profile name or a YAML file
    phases:
      - name: baseline
        duration: 60s          # seconds, or with a unit: 90s, 5m, 1h
        replicas: {ingest-detect: 1, identify: 2, kafka: 3}
      - name: more-identify
        duration: 60s
        replicas: {identify: 4}  # stages not named keep the previous phase's count

Mode emulated also takes, per phase, `in_flight: N` (a closed loop: each stream keeps N frames between ingest and
their last identity, as `aitax emulate --in-flight`) or `latency_bound: {within: 250ms, quantile: 0.99, factors:
[1, 32]}` (the highest factor whose runs hold every condition and the bound: MLPerf's server scenario, bisected as
`aitax emulate --latency-bound`; each probe is a run of the phase, its duration grown until its window holds the
faces the quantile needs).

The file's shape is a pydantic model (`SpecFile`) with a JSON Schema for editors (`aitax experiment schema`,
docs/experiment-spec.schema.json); the rules that tie fields together (a stage belongs to the spec's mode, phases
inherit replicas) are checked after it. Every error names the field (`phases[1].replicas.identfy`) and is raised
before anything is scaled or started.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema, model_validator

from aitax.cluster.links import LinkShape, parse_rate
from aitax.common.errors import UserError
from aitax.common.model_files import read_yaml
from aitax.runs.results import Workload
from aitax.telemetry.quantiles import DEFAULT_QUANTILES, quantile_key, window_for

MODES = ("real", "emulated")
KAFKA = "kafka"
# Stages per mode, consumers before producers: the order in which a phase brings them up.
STAGES = {
    "real": ("identify", "ingest-detect"),
    "emulated": ("emulate-consumers", "emulate-producers"),
}
PRODUCER_STAGE = {"real": "ingest-detect", "emulated": "emulate-producers"}
CONSUMER_STAGE = {"real": "identify", "emulated": "emulate-consumers"}
MIN_KAFKA_REPLICAS = 3  # topics are replicated 3 times (the chart's replication factor)
MAX_REPLICAS = 1000
MAX_DURATION_S = 7 * 24 * 3600
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
DURATION_PATTERN = r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$"
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class SpecError(UserError):
    """An invalid experiment spec; the message starts with the file and names the field."""


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__} ({value!r:.40})"


def _name(value: Any) -> str:
    if not isinstance(value, str) or not re.match(NAME_PATTERN, value):
        raise ValueError(f"{value!r} is not a name: 1-40 lowercase letters, digits and '-', starting and ending with "
                         "a letter or digit")
    return value


def _kubernetes_name(what: str):
    def check(value: Any) -> str:
        if not isinstance(value, str) or not re.match(NAME_PATTERN, value):
            raise ValueError(f"{value!r} is not a {what} (lowercase letters, digits, '-')")
        return value
    return check


def _duration(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        raise ValueError("missing or not a duration; write seconds (60) or with a unit (90s, 5m, 1h)")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = re.match(DURATION_PATTERN, str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration; write seconds (60) or with a unit (90s, 5m, 1h)")
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_DURATION_S:
        raise ValueError(f"{value!r}: must be more than 0 and at most 7 days")
    return seconds


def _factor(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{value!r}: expected a number greater than 0 (e.g. 1, 2, 4 ... 32)")
    return float(value)


def _count(minimum: int):
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r}: expected a whole number")
        if not minimum <= value <= MAX_REPLICAS:
            raise ValueError(f"{value}: must be between {minimum} and {MAX_REPLICAS}")
        return value
    return check


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a file path, got {_kind(value)}")
    return value


Name = Annotated[str, BeforeValidator(_name), WithJsonSchema({"type": "string", "pattern": NAME_PATTERN})]
Duration = Annotated[float, BeforeValidator(_duration), WithJsonSchema({
    "anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DURATION_S},
              {"type": "string", "pattern": DURATION_PATTERN}],
    "description": "seconds (60), or with a unit: 90s, 5m, 1h; at most 7 days"})]
Factor = Annotated[float, BeforeValidator(_factor), WithJsonSchema({"type": "number", "exclusiveMinimum": 0})]
Replicas = Annotated[int, BeforeValidator(_count(0)), WithJsonSchema({"type": "integer", "minimum": 0,
                                                                       "maximum": MAX_REPLICAS})]
Instances = Annotated[int, BeforeValidator(_count(1)), WithJsonSchema({"type": "integer", "minimum": 1,
                                                                        "maximum": MAX_REPLICAS})]
FilePath = Annotated[str, BeforeValidator(_path), WithJsonSchema({"type": "string", "minLength": 1})]
ALL_STAGES = (KAFKA, *(stage for stages in STAGES.values() for stage in stages))


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InstancesFile(_File):
    """Emulated instances per emulator pod's process (mode emulated). A field left out keeps the phase before's;
    a written one is a count (null is refused, as everywhere a value is written)."""

    producers: Instances = None  # type: ignore[assignment]
    consumers: Instances = None  # type: ignore[assignment]

    @model_validator(mode="after")
    def _something(self) -> InstancesFile:
        if self.producers is None and self.consumers is None:
            raise ValueError("expected a mapping like {producers: 4, consumers: 8}, got an empty one")
        return self


class LinksFile(_File):
    """The nodes' links of `aitax cluster` during this phase and the ones after it, until a phase sets another
    (cluster.links). `rate: unshaped` and no other field removes the shaping."""

    rate: Annotated[str, Field(min_length=1, description="each way, e.g. 1gbit, 250mbit; or unshaped")] = None  # type: ignore[assignment]
    delay_ms: Annotated[float, Field(gt=0)] = None  # type: ignore[assignment]
    loss_percent: Annotated[float, Field(ge=0, lt=100)] = None  # type: ignore[assignment]
    nodes: Literal["all", "brokers"] = Field(
        "all", description="whose links: every node's, or only those of the nodes running one of the release's "
                           "brokers (checked once the phase's brokers run; the other nodes' unshaped)")

    @model_validator(mode="after")
    def _something(self) -> LinksFile:
        if self.rate is None and self.delay_ms is None and self.loss_percent is None:
            raise ValueError("expected a mapping like {rate: 1gbit, loss_percent: 0.1}, got an empty one")
        return self


class LatencyBoundFile(_File):
    """A latency-bound search in place of one factor (mode emulated)."""

    within: Duration = Field(description="the bound on the quantile of end to end: 250ms, 1s")
    quantile: Annotated[float, Field(gt=0, lt=1)] = 0.99
    factors: Annotated[list[Factor], Field(min_length=2, max_length=2,
                                           description="[lowest, highest]: the range searched")]
    resolution: Annotated[float, Field(gt=1, description="the search ends when highest/lowest is below this")] = 1.1


class PhaseFile(_File):
    name: Name
    duration: Duration
    factor: Factor = Field(None, description="AI acceleration; inherited from the phase before (first: 1)")
    in_flight: Annotated[int, Field(ge=1, le=MAX_REPLICAS, description=(
        "mode emulated: a closed loop, this many frames per stream between ingest and their last identity "
        "(not inherited)"))] = None  # type: ignore[assignment]
    latency_bound: LatencyBoundFile = Field(None, description=(  # type: ignore[assignment]
        "mode emulated: search the highest factor within the bound, instead of running one factor"))
    replicas: Annotated[dict[str, Replicas], WithJsonSchema({
        "type": "object", "propertyNames": {"enum": list(ALL_STAGES)},
        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_REPLICAS},
        "description": "replicas per stage of the spec's mode, kafka at least 3; stages not named keep the "
                       "previous phase's count"})] | None = None
    instances: InstancesFile = None  # type: ignore[assignment]
    links: LinksFile = None  # type: ignore[assignment]


class SpecFile(_File):
    """An experiment spec file as written (docs/kubernetes.md)."""

    name: Name
    mode: Literal["real", "emulated"] = "real"
    release: Annotated[str, BeforeValidator(_kubernetes_name("Helm release name")),
                       WithJsonSchema({"type": "string", "pattern": NAME_PATTERN})] = "aitax"
    namespace: Annotated[str, BeforeValidator(_kubernetes_name("Kubernetes namespace name")),
                         WithJsonSchema({"type": "string", "pattern": NAME_PATTERN})] | None = None
    video: FilePath | None = None
    gallery: FilePath | None = None
    profile: Annotated[str, Field(min_length=1)] = None  # type: ignore[assignment]
    description: Annotated[Any, WithJsonSchema({"type": "string"})] = None  # free text, any scalar
    phases: Annotated[list[PhaseFile], Field(min_length=1)]


def spec_json_schema() -> dict[str, Any]:
    schema = SpecFile.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": "aitax experiment spec"}


@dataclass(frozen=True)
class PhaseLinks:
    """The links a phase shapes: on every node, or on the nodes running the release's brokers alone."""

    shape: LinkShape
    nodes: Literal["all", "brokers"] = "all"

    def describe(self) -> str:
        whose = "every node" if self.nodes == "all" else "the brokers' nodes"
        return f"{whose}: {self.shape.describe()}"


@dataclass(frozen=True)
class LatencySearch:
    """A phase's latency-bound search: the bound on a quantile of end to end, the factors searched."""

    within_ms: float
    quantile: float
    lowest: float
    highest: float
    resolution: float

    def describe(self) -> str:
        return (f"{quantile_key(self.quantile)} within {self.within_ms:g} ms, factors {self.lowest:g}-"
                f"{self.highest:g}")


@dataclass(frozen=True)
class Phase:
    name: str
    duration_s: float
    factor: float  # a search's lowest
    # Replicas of every stage after this phase's changes (inherited from earlier phases when not named).
    replicas: Mapping[str, int]
    # Only the stages this phase names: a kubernetes phase leaves the others as they are.
    changed: frozenset[str]
    instances: Mapping[str, int] = field(default_factory=dict)
    # The nodes' links from this phase on (inherited); None: no phase so far shaped them, they are left alone.
    links: PhaseLinks | None = None
    in_flight: int | None = None  # closed loop (emulated)
    search: LatencySearch | None = None  # instead of one factor (emulated)

    def emulated_workload(self, profile: str, pods: Mapping[str, int], instances: Mapping[str, int],
                          faces_per_stream_s: float, factor: float | None = None, **fields: Any
                          ) -> tuple[Workload, float | None]:
        """This phase's emulated load at `factor` (a search's probe; default the phase's) on `pods` producer and
        consumer processes of `instances` each: its Workload, and the faces/s it offers (None for a closed loop,
        which offers what completes). A probe of a search runs until its window holds the faces its quantile
        needs. `faces_per_stream_s`: what one stream offers at 1x (the profile's)."""
        factor = self.factor if factor is None else factor
        producers = pods["producers"] * instances["producers"]
        offered = None if self.in_flight else faces_per_stream_s * producers * factor
        duration_s, bound = self.duration_s, {}
        if self.search is not None and offered:
            duration_s = max(duration_s, window_for(self.search.quantile, offered))
            bound = {"latency_bound_ms": self.search.within_ms, "latency_bound_quantile": self.search.quantile,
                     "quantiles": sorted({*DEFAULT_QUANTILES, self.search.quantile})}
        workload = Workload(mode="emulated", producers=producers, consumers=pods["consumers"] * instances["consumers"],
                            producer_processes=pods["producers"], consumer_processes=pods["consumers"],
                            duration_s=duration_s, factor=factor, profile=profile, in_flight=self.in_flight, **bound,
                            **fields)
        return workload, offered


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    mode: str
    phases: tuple[Phase, ...]
    release: str = "aitax"
    namespace: str | None = None
    video: Path | None = None
    gallery: Path | None = None
    profile: str = "paper"
    source: str = "<spec>"

    @property
    def stages(self) -> tuple[str, ...]:
        """Every stage some phase scales: Kafka first, then consumers, then producers."""
        named = {stage for phase in self.phases for stage in phase.replicas}
        return tuple(stage for stage in (KAFKA, *STAGES[self.mode]) if stage in named)

    @property
    def total_duration_s(self) -> float:
        return sum(phase.duration_s for phase in self.phases)


def load_spec(path: Path | str) -> ExperimentSpec:
    """Read and validate a spec file; paths in it are relative to the file's folder."""
    path = Path(path)
    return parse_spec(read_yaml(path, "experiment spec", SpecError), source=str(path), base_dir=path.parent)


def parse_spec(document: Any, source: str = "<spec>", base_dir: Path | None = None) -> ExperimentSpec:
    """Validate a spec already parsed from YAML (a mapping): its shape by `SpecFile`, then the rules between
    fields; phases inherit replicas, factor and instances from the phase before."""
    try:
        spec = SpecFile.model_validate(document)
    except ValidationError as error:
        raise _spec_error(error, source) from None

    def fail(where: str, problem: str) -> SpecError:
        return SpecError(f"{source}: {where}: {problem}")

    mode = spec.mode
    if mode == "real" and spec.profile is not None:
        raise fail("profile", "only for mode: emulated")
    profile = spec.profile or "paper"
    if base_dir is not None and profile.endswith((".yaml", ".yml")) and not Path(profile).is_absolute():
        profile = str(base_dir / profile)  # a profile file, relative to the spec like video and gallery
    paths: dict[str, Path | None] = {}
    for key in ("video", "gallery"):
        value = getattr(spec, key)
        if value is not None and mode != "real":
            raise fail(key, "only for mode: real (the emulator needs no video or gallery)")
        paths[key] = None if value is None else (
            Path(value) if base_dir is None or Path(value).is_absolute() else base_dir / value)
    phases: list[Phase] = []
    replicas: dict[str, int] = {}
    instances = {"producers": 1, "consumers": 1}
    links: PhaseLinks | None = None
    factor = 1.0
    for index, raw in enumerate(spec.phases):
        where = f"phases[{index}]"
        if any(p.name == raw.name for p in phases):
            raise fail(f"{where}.name", f"{raw.name!r} is used by an earlier phase; phase names must be unique")
        factor = factor if raw.factor is None else raw.factor
        if mode == "real" and factor != 1.0:
            raise fail(f"{where}.factor", f"{factor:g}: the real stages cannot be accelerated; use mode: emulated")
        changed = _replicas(raw.replicas, mode, f"{where}.replicas", fail, required=index == 0)
        replicas.update(changed)
        if raw.instances is not None:
            if mode != "emulated":
                raise fail(f"{where}.instances", "only for mode: emulated (processes per emulator pod)")
            instances.update(raw.instances.model_dump(exclude_none=True))
        if raw.links is not None:
            links = _links(raw.links, f"{where}.links", fail)
        search = _search(raw, mode, where, fail)
        phases.append(Phase(raw.name, raw.duration, search.lowest if search else factor, dict(replicas),
                            frozenset(changed), dict(instances), links, raw.in_flight, search))
    return ExperimentSpec(name=spec.name, mode=mode, phases=tuple(phases), release=spec.release,
                          namespace=spec.namespace, video=paths["video"], gallery=paths["gallery"], profile=profile,
                          source=source)


def _search(raw: PhaseFile, mode: str, where: str, fail) -> LatencySearch | None:
    """The phase's latency-bound search, checked against what else the phase says."""
    for key in ("in_flight", "latency_bound"):
        if getattr(raw, key) is not None and mode != "emulated":
            raise fail(f"{where}.{key}", "only for mode: emulated (the real stages' load is the video's)")
    bound = raw.latency_bound
    if bound is None:
        return None
    if raw.in_flight is not None:
        raise fail(f"{where}.latency_bound", "searches factors of an open loop; a phase with in_flight has none")
    if raw.factor is not None:
        raise fail(f"{where}.factor", "a phase with latency_bound searches its factors; give latency_bound.factors")
    lowest, highest = bound.factors
    if lowest >= highest:
        raise fail(f"{where}.latency_bound.factors", f"[{lowest:g}, {highest:g}]: the lowest first, below the highest")
    return LatencySearch(bound.within * 1000, bound.quantile, lowest, highest, bound.resolution)


def _links(raw: LinksFile, where: str, fail) -> PhaseLinks:
    if raw.rate == "unshaped":
        if raw.delay_ms is not None or raw.loss_percent is not None:
            raise fail(where, "rate: unshaped removes all shaping; give no delay_ms or loss_percent with it")
        return PhaseLinks(LinkShape(), raw.nodes)
    try:
        rate = None if raw.rate is None else parse_rate(raw.rate)
        return PhaseLinks(LinkShape(rate_mbit=rate, delay_ms=raw.delay_ms, loss_percent=raw.loss_percent), raw.nodes)
    except UserError as error:
        raise fail(where, str(error)) from None


def _replicas(value: dict[str, int] | None, mode: str, where: str, fail, required: bool) -> dict[str, int]:
    if not value:
        if required:
            raise fail(where, f"the first phase must give replicas, e.g. {{{', '.join(STAGES[mode])}}}")
        return {}
    allowed = (KAFKA, *STAGES[mode])
    other_mode = next(m for m in MODES if m != mode)
    for stage, count in value.items():
        if stage not in allowed:
            hint = f" ({stage} belongs to mode: {other_mode})" if stage in STAGES[other_mode] else ""
            raise fail(f"{where}.{stage}", f"unknown stage{hint}; expected one of {', '.join(allowed)}")
        if stage == KAFKA and count < MIN_KAFKA_REPLICAS:
            raise fail(f"{where}.{stage}", f"{count}: must be between {MIN_KAFKA_REPLICAS} and {MAX_REPLICAS} "
                                           "(topics are replicated 3 times)")
    return dict(value)


# What a mapping at each place of the file holds, for the error that finds something else there.
_MAPPING_OF = {(): "a mapping with name, mode and phases", ("phases", 0): "a mapping with name, duration and replicas",
               ("phases", 0, "replicas"): "a mapping of stage to replica count",
               ("phases", 0, "instances"): "a mapping like {producers: 4, consumers: 8}",
               ("phases", 0, "links"): "a mapping like {rate: 1gbit, loss_percent: 0.1}",
               ("phases", 0, "latency_bound"): "a mapping like {within: 250ms, factors: [1, 32]}"}
_MISSING_HINT = {"duration": "; write seconds (60) or with a unit (90s, 5m, 1h)",
                 "name": ": 1-40 lowercase letters, digits and '-'"}
_MODEL_AT = {(): SpecFile, ("phases", 0): PhaseFile, ("phases", 0, "instances"): InstancesFile,
             ("phases", 0, "links"): LinksFile, ("phases", 0, "latency_bound"): LatencyBoundFile}


def _spec_error(error: ValidationError, source: str) -> SpecError:
    """The first validation error as `SOURCE: FIELD: problem`, the field written as in the file."""
    first = error.errors()[0]
    loc = first["loc"]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".") or "top level"
    shape = tuple(0 if isinstance(part, int) else part for part in loc)
    kind = first["type"]
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        problem = f"expected {_MAPPING_OF.get(shape, 'a mapping')}, got {_kind(first['input'])}"
    elif shape == ("phases",):
        problem = "expected a non-empty list of phases"
    elif kind == "extra_forbidden":
        allowed = _MODEL_AT[shape[:-1]].model_fields
        problem = f"unknown field; expected one of {', '.join(sorted(allowed))}"
    elif kind == "literal_error":
        problem = f"{first['input']!r} is not one of {', '.join(MODES)}"
    elif kind == "missing":
        problem = "missing" + _MISSING_HINT.get(str(loc[-1]), "")
    elif kind == "value_error":  # our own words, which may start with the value itself
        problem = first["msg"].removeprefix("Value error, ")
    else:
        problem = first["msg"][0].lower() + first["msg"][1:]
    return SpecError(f"{source}: {where}: {problem}")
