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

Every error names the field (`phases[1].replicas.identfy`) and is raised before anything is scaled or started.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import UserError

MODES = ("real", "emulated")
KAFKA = "kafka"
# Stages per mode, consumers before producers: the order in which a phase brings them up.
STAGES = {
    "real": ("identify", "ingest-detect"),
    "emulated": ("emulate-consumers", "emulate-producers"),
}
PRODUCER_STAGE = {"real": "ingest-detect", "emulated": "emulate-producers"}
CONSUMER_STAGE = {"real": "identify", "emulated": "emulate-consumers"}
INSTANCE_KEYS = ("producers", "consumers")
MIN_KAFKA_REPLICAS = 3  # topics are replicated 3 times
MAX_REPLICAS = 1000
MAX_DURATION_S = 7 * 24 * 3600
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_TOP_KEYS = {"name", "mode", "release", "namespace", "video", "gallery", "profile", "description", "phases"}
_PHASE_KEYS = {"name", "duration", "factor", "replicas", "instances"}


class SpecError(UserError):
    """An invalid experiment spec; the message starts with the file and names the field."""


@dataclass(frozen=True)
class Phase:
    name: str
    duration_s: float
    factor: float
    # Replicas of every stage after this phase's changes (inherited from earlier phases when not named).
    replicas: Mapping[str, int]
    # Only the stages this phase names: a kubernetes phase leaves the others as they are.
    changed: frozenset[str]
    instances: Mapping[str, int] = field(default_factory=dict)


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
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"{path}: cannot read the experiment spec ({error.strerror or error})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{path}: not valid YAML{where}: {getattr(error, 'problem', error)}") from None
    return parse_spec(document, source=str(path), base_dir=path.parent)


def parse_spec(document: Any, source: str = "<spec>", base_dir: Path | None = None) -> ExperimentSpec:
    """Validate a spec already parsed from YAML (a mapping)."""

    def fail(where: str, problem: str) -> SpecError:
        return SpecError(f"{source}: {where}: {problem}")

    if not isinstance(document, Mapping):
        raise fail("top level", f"expected a mapping with name, mode and phases, got {_kind(document)}")
    _reject_unknown(document, _TOP_KEYS, "", fail)
    name = _name(document.get("name"), "name", fail)
    mode = document.get("mode", "real")
    if mode not in MODES:
        raise fail("mode", f"{mode!r} is not one of {', '.join(MODES)}")
    release = document.get("release", "aitax")
    if not isinstance(release, str) or not _NAME.match(release):
        raise fail("release", f"{release!r} is not a Helm release name (lowercase letters, digits, '-')")
    namespace = document.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not _NAME.match(namespace)):
        raise fail("namespace", f"{namespace!r} is not a Kubernetes namespace name")
    profile = document.get("profile", "paper")
    if not isinstance(profile, str) or not profile:
        raise fail("profile", "expected a built-in profile name (e.g. paper) or a path to a YAML profile")
    if mode == "real" and "profile" in document:
        raise fail("profile", "only for mode: emulated")
    if base_dir is not None and profile.endswith((".yaml", ".yml")) and not Path(profile).is_absolute():
        profile = str(base_dir / profile)  # a profile file, relative to the spec like video and gallery
    paths = {}
    for key in ("video", "gallery"):
        value = document.get(key)
        if value is None:
            paths[key] = None
        elif not isinstance(value, str) or not value:
            raise fail(key, f"expected a file path, got {_kind(value)}")
        elif mode != "real":
            raise fail(key, "only for mode: real (the emulator needs no video or gallery)")
        else:
            paths[key] = Path(value) if base_dir is None or Path(value).is_absolute() else base_dir / value

    raw_phases = document.get("phases")
    if not isinstance(raw_phases, list) or not raw_phases:
        raise fail("phases", "expected a non-empty list of phases")
    phases: list[Phase] = []
    replicas: dict[str, int] = {}
    instances = dict.fromkeys(INSTANCE_KEYS, 1)
    factor = 1.0
    for index, raw in enumerate(raw_phases):
        where = f"phases[{index}]"
        if not isinstance(raw, Mapping):
            raise fail(where, f"expected a mapping with name, duration and replicas, got {_kind(raw)}")
        _reject_unknown(raw, _PHASE_KEYS, where + ".", fail)
        phase_name = _name(raw.get("name"), f"{where}.name", fail)
        if any(p.name == phase_name for p in phases):
            raise fail(f"{where}.name", f"{phase_name!r} is used by an earlier phase; phase names must be unique")
        duration = _duration(raw.get("duration"), f"{where}.duration", fail)
        if "factor" in raw:
            factor = _positive_number(raw["factor"], f"{where}.factor", fail)
        if mode == "real" and factor != 1.0:
            raise fail(f"{where}.factor", f"{factor:g}: the real stages cannot be accelerated; use mode: emulated")
        changed = _replicas(raw.get("replicas"), mode, f"{where}.replicas", fail, required=index == 0)
        replicas.update(changed)
        if "instances" in raw:
            if mode != "emulated":
                raise fail(f"{where}.instances", "only for mode: emulated (processes per emulator pod)")
            instances.update(_instances(raw["instances"], f"{where}.instances", fail))
        phases.append(Phase(phase_name, duration, factor, dict(replicas), frozenset(changed), dict(instances)))
    return ExperimentSpec(name=name, mode=mode, phases=tuple(phases), release=release, namespace=namespace,
                          video=paths["video"], gallery=paths["gallery"], profile=profile, source=source)


def _reject_unknown(mapping: Mapping, allowed: set[str], prefix: str, fail) -> None:
    for key in mapping:
        if key not in allowed:
            raise fail(f"{prefix}{key}", f"unknown field; expected one of {', '.join(sorted(allowed))}")


def _name(value: Any, where: str, fail) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise fail(where, f"{value!r} is not a name: 1-40 lowercase letters, digits and '-', starting and ending "
                          "with a letter or digit")
    return value


def _duration(value: Any, where: str, fail) -> float:
    if isinstance(value, bool) or value is None:
        raise fail(where, "missing or not a duration; write seconds (60) or with a unit (90s, 5m, 1h)")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise fail(where, f"{value!r} is not a duration; write seconds (60) or with a unit (90s, 5m, 1h)")
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_DURATION_S:
        raise fail(where, f"{value!r}: must be more than 0 and at most 7 days")
    return seconds


def _positive_number(value: Any, where: str, fail) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise fail(where, f"{value!r}: expected a number greater than 0 (e.g. 1, 2, 4 ... 32)")
    return float(value)


def _count(value: Any, where: str, fail, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(where, f"{value!r}: expected a whole number")
    if not minimum <= value <= MAX_REPLICAS:
        raise fail(where, f"{value}: must be between {minimum} and {MAX_REPLICAS}")
    return value


def _replicas(value: Any, mode: str, where: str, fail, required: bool) -> dict[str, int]:
    if value is None:
        if required:
            raise fail(where, f"the first phase must give replicas, e.g. {{{', '.join(STAGES[mode])}}}")
        return {}
    if not isinstance(value, Mapping) or (required and not value):
        raise fail(where, f"expected a mapping of stage to replica count, got {_kind(value)}")
    allowed = (KAFKA, *STAGES[mode])
    other_mode = next(m for m in MODES if m != mode)
    counts = {}
    for stage, count in value.items():
        if stage not in allowed:
            hint = f" ({stage} belongs to mode: {other_mode})" if stage in STAGES[other_mode] else ""
            raise fail(f"{where}.{stage}", f"unknown stage{hint}; expected one of {', '.join(allowed)}")
        counts[stage] = _count(count, f"{where}.{stage}", fail, MIN_KAFKA_REPLICAS if stage == KAFKA else 0)
    return counts


def _instances(value: Any, where: str, fail) -> dict[str, int]:
    if not isinstance(value, Mapping) or not value:
        raise fail(where, f"expected a mapping like {{producers: 4, consumers: 8}}, got {_kind(value)}")
    counts = {}
    for key, count in value.items():
        if key not in INSTANCE_KEYS:
            raise fail(f"{where}.{key}", f"unknown field; expected one of {', '.join(INSTANCE_KEYS)}")
        counts[key] = _count(count, f"{where}.{key}", fail, 1)
    return counts


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__} ({value!r:.40})"
