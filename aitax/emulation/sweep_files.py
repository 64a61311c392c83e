"""`aitax emulate`'s workload and driver files, kept apart as OpenMessaging Benchmark keeps them: what load the sweep
offers at every factor, and how its Kafka clients behave. Each file is the results' own model (`Workload`,
`Driver`), so it reads as the `workload` and `driver` its runs' results record. The sweep's plan (factors,
repeats, the stop rule, a latency bound's search) stays on the command line. The command takes a file's values as
its options' defaults, so a flag given overrides the file."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aitax.common.errors import UserError
from aitax.common.model_files import read_yaml, validate_model
from aitax.runs.results import Driver, Workload

# emulate's option -> the Workload field a workload file gives it by, and how the option takes the value
WORKLOAD_OPTIONS: Mapping[str, tuple[str, Callable[[Any], Any]]] = {
    "workload": ("application", str), "producers": ("producers", int), "consumers": ("consumers", int),
    "processes": ("producer_processes", int), "duration": ("duration_s", float), "stages": ("stages", int),
    "profile": ("profile", str), "accelerator": ("accelerators", tuple), "compute": ("compute", str),
    "drain": ("drain_s", float), "ramp_up": ("ramp_up_s", float), "ramp_down": ("ramp_down_s", float),
    "quantiles": ("quantiles", tuple), "in_flight": ("in_flight", lambda count: (count,)),
}
DRIVER_OPTIONS = ("kafka_client", "keying", "max_queue_delay_ms", "results_linger_ms", "max_batch")
# What a workload file may not say for emulate, and who says it instead
NOT_IN_WORKLOAD = {
    "factor": "the sweep's plan sets it (--factors)",
    "latency_bound_ms": "the sweep's plan searches it (--latency-bound)",
    "latency_bound_quantile": "the sweep's plan sets it (--quantile)",
    **dict.fromkeys(("video", "cameras", "gallery", "pace"), "emulated stages read no video (real stages only)"),
}


def workload_options(path: Path) -> dict[str, Any]:
    """The emulate options a workload file gives, by option name."""
    document = read_yaml(path, "workload file")
    if isinstance(document, dict):
        for field, who in NOT_IN_WORKLOAD.items():
            if field in document:
                raise UserError(f"{path}: {field}: not in an emulate workload: {who}")
        if document.get("mode", "emulated") != "emulated":
            raise UserError(f"{path}: mode {document['mode']!r}: emulate runs emulated stages (mode: emulated)")
    # producers and consumers are required of a run's workload; a file that leaves them out takes the application's
    workload = validate_model(document, Workload, path, "workload file",
                              {"mode": "emulated", "producers": 1, "consumers": 1, "duration_s": 30.0})
    given = set(document)
    if {"producer_processes", "consumer_processes"} <= given and \
            workload.producer_processes != workload.consumer_processes:
        raise UserError(f"{path}: consumer_processes {workload.consumer_processes}: the sweep runs as many processes "
                        f"on each side as producer_processes ({workload.producer_processes})")
    options = {option: convert(getattr(workload, field)) for option, (field, convert) in WORKLOAD_OPTIONS.items()
               if field in given}
    if "consumer_processes" in given:
        options["processes"] = workload.consumer_processes
    return options


def driver_options(path: Path) -> dict[str, Any]:
    """The emulate options a driver file gives, by option name."""
    document = read_yaml(path, "driver file")
    driver = validate_model(document, Driver, path, "driver file")
    if driver.send != "every":
        raise UserError(f"{path}: send {driver.send!r}: an emulated track's thumbnails follow its profile's "
                        "thumbnail_share, not a send policy")
    return {option: getattr(driver, option) for option in DRIVER_OPTIONS if option in document}
