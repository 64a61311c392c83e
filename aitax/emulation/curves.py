"""A device's compute as time per batch against batch size: what `--accelerator NAME|FILE` puts in place of a stage's
sampled per-item times.

A real accelerator is not "compute / N": a GPU's FaceNet costs about the same for 1 face as for 16, so its speed-up
depends on the batch the stage forms, which the load and the batching policy decide (`../shared` notes; the shipped
curves below). A curve is one of:
- measured points, (batch size, ms per batch), interpolated linearly between them; below the first point its time,
  beyond the last the last segment's slope (never below the last point's time);
- a fixed cost per batch plus a cost per item.
Either may carry a spread: quantiles of a multiplier on the curve's time (median 1), sampled per batch.

`host_cpu` says where the time is spent: false (an accelerator's curve) and the emulated stage sleeps, leaving the
host's cores to the brokers and the other stages; true (a curve measured on this host's CPU, as `aitax calibrate`
writes on one) and it takes that much CPU time on a host core, so the emulator competes for the cores as the real
stage does.

A curve file (YAML) names the stage it replaces and says where its numbers come from: what was measured, on what,
and what was not. `aitax calibrate` writes the same format for the runtime at hand.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from aitax.common.errors import UserError
from aitax.emulation.profile import Distribution, QuantilePoints, read_versioned_yaml

CURVE_VERSION = 1
BUILT_IN_FOLDER = Path(__file__).with_name("accelerators")
# This project's own CPU path (OpenVINO bf16 on one core of its 2-core EPYC, `aitax calibrate`): what a device's
# speed-up is read against
BASELINE_CURVE = "epyc-openvino-bf16"


@dataclass(frozen=True)
class BatchCurve:
    """Milliseconds per batch of `n` items on one device."""

    name: str
    stage: str  # the stage whose compute it replaces: identify (per face batch) or detect (per frame batch)
    points: tuple[tuple[int, float], ...]  # (batch size, ms per batch), batch sizes increasing
    spread: Distribution | None = None  # a multiplier on the curve's time, sampled per batch
    host_cpu: bool = False  # the time is the host's CPU time (a CPU runtime), not a device's

    def ms(self, batch: int, rng: random.Random | None = None) -> float:
        """The time of one batch of `batch` items (a sampled spread when `rng` is given, else the median)."""
        if batch < 1:
            raise ValueError(f"batch of {batch}: at least 1 item")
        sizes = [size for size, _ in self.points]
        if batch <= sizes[0] or len(self.points) == 1:
            base = self.points[0][1] if batch <= sizes[0] else self._beyond(batch)
        elif batch >= sizes[-1]:
            base = self._beyond(batch)
        else:
            right = bisect.bisect_left(sizes, batch)
            (n0, t0), (n1, t1) = self.points[right - 1], self.points[right]
            base = t0 + (t1 - t0) * (batch - n0) / (n1 - n0)
        multiplier = 1.0 if self.spread is None else (self.spread.sample(rng) if rng else self.spread.quantile(0.5))
        return base * multiplier

    def _beyond(self, batch: int) -> float:
        """Past the last point: the last segment's slope, never below the last point's time."""
        if len(self.points) == 1:
            return self.points[0][1]
        (n0, t0), (n1, t1) = self.points[-2], self.points[-1]
        return max(t1, t1 + (t1 - t0) / (n1 - n0) * (batch - n1))

    def per_item_ms(self, batch: int) -> float:
        return self.ms(batch) / batch


class CurveFile(BaseModel):
    """A curve YAML file, validated field by field: measured `per_batch_ms` points or `fixed_ms` + `per_item_ms`."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    name: str
    stage: Literal["identify", "detect"]
    provenance: str = Field(min_length=1)  # what was measured, on what, and what was not
    per_batch_ms: list[tuple[PositiveInt, PositiveFloat]] | None = None
    fixed_ms: float | None = Field(None, ge=0)
    per_item_ms: float | None = Field(None, ge=0)
    spread: QuantilePoints | None = None  # quantiles of a multiplier (median about 1)
    host_cpu: bool = False  # measured on the host's CPU: the emulated stage takes CPU time instead of sleeping

    @model_validator(mode="after")
    def _one_form(self) -> CurveFile:
        linear = self.fixed_ms is not None or self.per_item_ms is not None
        if (self.per_batch_ms is None) == (not linear):
            raise ValueError("give either per_batch_ms points or fixed_ms and per_item_ms")
        if linear and (self.fixed_ms is None or self.per_item_ms is None):
            raise ValueError("fixed_ms and per_item_ms go together")
        if self.per_batch_ms is not None:
            if not self.per_batch_ms:
                raise ValueError("per_batch_ms: at least one point")
            if any(b[0] <= a[0] for a, b in itertools.pairwise(self.per_batch_ms)):
                raise ValueError("per_batch_ms: batch sizes must increase")
        return self

    def curve(self) -> BatchCurve:
        points = (tuple((int(n), float(ms)) for n, ms in self.per_batch_ms) if self.per_batch_ms is not None
                  else ((1, self.fixed_ms + self.per_item_ms), (2, self.fixed_ms + 2 * self.per_item_ms)))
        return BatchCurve(self.name, self.stage, points,
                          None if self.spread is None else Distribution(tuple(map(tuple, self.spread))),
                          self.host_cpu)


def built_in_curves() -> dict[str, Path]:
    return {path.stem: path for path in sorted(BUILT_IN_FOLDER.glob("*.yaml"))}


def load_curve(name_or_path: str) -> BatchCurve:
    """A shipped curve by name, or a curve file; anything missing or malformed is one line naming it."""
    shipped = built_in_curves()
    path = shipped.get(name_or_path, Path(name_or_path))
    if not path.is_file():
        raise UserError(f"--accelerator {name_or_path}: neither a shipped curve ({', '.join(shipped)}) nor a file")
    return read_versioned_yaml(path, CurveFile, "curve", CURVE_VERSION).curve()


def write_curve(path: Path, name: str, stage: str, provenance: str, points: list[tuple[int, float]],
                spread: Distribution | None = None, host_cpu: bool = False) -> Path:
    """A curve file `load_curve` reads back (what `aitax calibrate` writes)."""
    document = {"version": CURVE_VERSION, "name": name, "stage": stage, "provenance": provenance,
                "host_cpu": host_cpu, "per_batch_ms": [[int(n), round(float(ms), 4)] for n, ms in points]}
    if spread is not None:
        document["spread"] = [list(p) for p in spread.points]
    CurveFile.model_validate(document)  # never write what cannot be read back
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=120))
    return path
