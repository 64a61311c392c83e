"""A declared edge data centre (a design file, `designs/*.yaml`) scaled onto this machine as a testbed.

Every capacity of the design (each broker's cores, drives and memory, each node's link) is divided by one scale
factor, so the ratios between them, and with them the order in which resources run out, are the design's. `scale:
auto` picks the smallest factor that leaves half of this machine's cores to the load and the other services.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aitax.common.errors import UserError
from aitax.common.model_files import read_model
from aitax.stack.config import MAX_BROKERS, MIN_BROKERS, Testbed

BROKERS_SHARE_OF_MACHINE = 0.5  # of this machine's cores, at most, for the brokers' slices under `scale: auto`
LINUX_DIRTY_RATIO = Path("/proc/sys/vm/dirty_ratio")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Drives(_Strict):
    count: int = Field(1, ge=1, le=4)  # per broker
    # sequential write of one drive; `machine`: the log dirs stay on this machine's own disk, unthrottled
    write_mb_s: float | Literal["machine"]

    @field_validator("write_mb_s")
    @classmethod
    def _positive(cls, value: float | str) -> float | str:
        if value != "machine" and value <= 0:
            raise ValueError("a drive writes more than 0 MB/s (or `machine`: this machine's own disk)")
        return value


class BrokerNode(_Strict):
    cpu_cores: float = Field(..., gt=0)
    memory_gb: float = Field(..., gt=0)  # its page cache, of which the kernel lets `vm.dirty_ratio` be dirty
    drives: Drives
    link_gbit_s: float = Field(..., gt=0)


class Design(_Strict):
    name: str
    description: str = ""
    source: str = ""  # where the design's figures come from
    brokers: int = Field(3, ge=MIN_BROKERS, le=MAX_BROKERS)
    broker: BrokerNode
    scale: float | Literal["auto"] = "auto"

    def scale_for(self, machine_cores: int) -> float:
        if self.scale != "auto":
            return self.scale
        return max(1.0, self.brokers * self.broker.cpu_cores / (BROKERS_SHARE_OF_MACHINE * machine_cores))

    def testbed(self, machine_cores: int | None = None, dirty_ratio: float | None = None) -> Testbed:
        cores = machine_cores or os.cpu_count() or 1
        scale = self.scale_for(cores)
        broker_cores = self.broker.cpu_cores / scale
        if self.brokers * broker_cores >= cores:
            raise UserError(f"design {self.name}: {self.brokers} brokers x {broker_cores:.2f} cores (scale "
                            f"{scale:g}) leave none of this machine's {cores} cores to the load; raise `scale`")
        if dirty_ratio is None:
            dirty_ratio = int(LINUX_DIRTY_RATIO.read_text()) / 100
        drives = self.broker.drives
        memory = self.broker.memory_gb * 2**30 / scale
        return Testbed(
            design=self.name, scale=scale, broker_cpu_cores=broker_cores,
            client_cpu_cores=cores - self.brokers * broker_cores,
            drive_bytes_per_s=0.0 if drives.write_mb_s == "machine" else drives.write_mb_s * 1e6 / scale,
            dirty_bytes_per_drive=round(memory * dirty_ratio / drives.count),
            link_mbit=self.broker.link_gbit_s * 1000 / scale)


def load_design(path: Path) -> Design:
    """The design in `path`; a missing file or a bad field is one line naming both."""
    return read_model(path, Design, "design")
