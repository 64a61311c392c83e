"""The local stack as one unit: `up` (idempotent, waits for health), `status`, `down`, broker faults."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aitax.common.daemons import ManagedProcess, require_free_port, wait_until
from aitax.common.errors import UserError
from aitax.common.locks import exclusive
from aitax.common.paths import stack_dir
from aitax.stack import calibration, cpu_slices, drives, elasticsearch, kafka, prometheus, security
from aitax.stack.config import StackConfig
from aitax.stack.warmup import BROKER_WARMUP_S, warm_brokers

KAFKA_START_TIMEOUT_S = 120
ES_START_TIMEOUT_S = 180
PROMETHEUS_START_TIMEOUT_S = 60


def description_file() -> Path:
    return stack_dir() / "stack.json"


def local_marker(variable: str) -> str:
    """The variable saying `variable` holds only the local stack's default identity (the principal's name)."""
    return f"{variable}_LOCAL"


def current_config() -> StackConfig | None:
    """The configuration the running (or last started) stack was brought up with."""
    path = description_file()
    return StackConfig.load(path) if path.exists() else None


_lock_depth = 0  # up() inside reshape_kafka() already holds the lock


def _one_at_a_time(change: Callable) -> Callable:
    """Stack-changing commands take turns per state folder: a second `up`, `down` or Kafka reshape waits for
    the first (two at once corrupted a broker's storage format mid-restart)."""

    @functools.wraps(change)
    def locked(*args: Any, **kwargs: Any) -> Any:
        global _lock_depth
        if _lock_depth:
            return change(*args, **kwargs)
        with exclusive(stack_dir() / ".lock", f"another aitax command is changing the stack in {stack_dir()}; "
                       "waiting for it ...", kwargs.get("progress", print)):
            _lock_depth += 1
            try:
                return change(*args, **kwargs)
            finally:
                _lock_depth -= 1

    return locked


def running_config() -> StackConfig:
    """The local stack's configuration, for commands that need it running: a stack that was started once but
    whose brokers are gone (stopped, crashed, a rebooted machine) is a one-line error, not a client timeout."""
    config = current_config()
    if config is None:
        raise UserError("no local stack: run `aitax stack up` first")
    down = [broker.node_id for broker in kafka.brokers(config) if not broker.process.is_running()]
    if down:
        raise UserError(f"the local stack is not running (Kafka broker(s) {', '.join(map(str, down))} down): "
                        f"`aitax stack up` first")
    return config


def install(config: StackConfig) -> None:
    kafka.install()
    if config.elasticsearch:
        elasticsearch.install()
    if config.prometheus:
        prometheus.binary()


@_one_at_a_time
def up(config: StackConfig, progress=print, broker_warmup_s: float = BROKER_WARMUP_S) -> StackConfig:
    """Start whatever is not running yet and wait until every component is healthy; brokers it started lead their
    preferred partitions and are warmed for `broker_warmup_s` (`stack.warmup`) before it returns."""
    running = current_config()
    if running is not None and any(p.is_running() for p in processes(running)):
        if running.brokers != config.brokers or running.log_dirs_per_broker != config.log_dirs_per_broker:
            raise UserError(
                f"a stack with {running.brokers} brokers x {running.log_dirs_per_broker} log dirs is running; "
                f"`aitax stack down` first to change it to {config.brokers} x {config.log_dirs_per_broker}"
            )
        if running.testbed != config.testbed:
            described = running.testbed.design if running.testbed else "no testbed"
            raise UserError(f"a stack on {described} is running; `aitax stack down` first to change its design")
        if (running.tls, running.elasticsearch_tls) != (config.tls, config.elasticsearch_tls):
            running_kind = ("TLS" if running.elasticsearch_tls else "TLS Kafka, plaintext Elasticsearch") \
                if running.tls else "plaintext"
            wanted = "TLS" if config.tls else "plaintext"
            raise UserError(f"a {running_kind} stack is running; `aitax stack down` first to start it {wanted}")
        # Keep what runs; a partial stack may gain components it lacked.
        config = replace(
            running,
            elasticsearch=config.elasticsearch or running.elasticsearch,
            prometheus=config.prometheus or running.prometheus,
        )
    install(config)
    config.save(description_file())

    started = time.monotonic()
    if config.testbed is not None:
        _prepare_testbed(config, progress)
    calibration.calibrate([d for broker in kafka.brokers(config) for d in broker.log_dirs], progress=progress)
    started_brokers = _start_kafka(config, progress)
    if config.elasticsearch:
        _start_elasticsearch(config, progress)
    if config.prometheus:
        _start_prometheus(config, progress)

    progress("waiting for all brokers in the cluster metadata ...")
    wait_until(
        lambda: kafka.cluster_health(config).brokers_in_metadata == config.node_ids,
        KAFKA_START_TIMEOUT_S,
        "Kafka cluster",
        kafka.brokers(config)[0].process,
    )
    kafka.ensure_topics(config)
    wait_until(lambda: kafka.cluster_health(config).healthy(config.node_ids), KAFKA_START_TIMEOUT_S, "Kafka ISR")
    if started_brokers:
        _balance_and_warm(config, progress, broker_warmup_s)
    # Brokers start unlimited (on a design's tenth of a core a JVM would take minutes) and run in their cores, their
    # JIT compilers outside them
    cpu_slices.limit_brokers(config)
    _move_compilers(config)
    if config.elasticsearch:
        progress("waiting for Elasticsearch ...")
        wait_until(
            lambda: elasticsearch.health(config) in ("green", "yellow"),
            ES_START_TIMEOUT_S,
            "Elasticsearch",
            elasticsearch.process(),
        )
        from aitax.telemetry.elastic import install_event_template

        install_event_template(config.elasticsearch_url, elasticsearch.admin_credentials(config))
    if config.prometheus:
        wait_until(lambda: prometheus.ready(config), PROMETHEUS_START_TIMEOUT_S, "Prometheus", prometheus.process())
    progress(f"stack up in {time.monotonic() - started:.1f} s")
    return config


def _balance_and_warm(config: StackConfig, progress, warmup_s: float) -> None:
    """Leaders where they belong, then the brokers' JIT warmed: a run's window measures neither."""
    failed = kafka.elect_preferred_leaders(config)
    if failed:
        progress(f"preferred leader election failed for {len(failed)} partitions, e.g. {next(iter(failed.items()))}"
                 "; the controller retries within 5 minutes")
    if warmup_s > 0:
        progress(f"warming the brokers for {warmup_s:g} s ...")
        progress(warm_brokers(kafka.admin_settings(config), config.replication_factor, config.min_insync_replicas,
                              warmup_s).summary())


def _start_kafka(config: StackConfig, progress) -> bool:
    """Start the brokers that are not running; whether any was."""
    brokers = kafka.brokers(config)
    to_start = [b for b in brokers if not b.process.is_running()]
    for broker in to_start:
        broker.require_free_ports()
    cluster_id = kafka.cluster_id()
    if config.tls or config.elasticsearch_tls:
        security.issue_identities()
    for broker in to_start:
        broker.write_config()
        if not broker.is_formatted():
            broker.format_storage(cluster_id)
    for broker in to_start:
        progress(f"starting kafka broker {broker.node_id} on port {broker.port}")
        _start_broker_process(config, broker)
    return bool(to_start)


def _start_broker_process(config: StackConfig, broker: kafka.Broker) -> None:
    """On a testbed, into the broker's CPU slice at once (the JVM's later threads follow it)."""
    pid = broker.start()
    if config.testbed is not None:
        cpu_slices.place(config, cpu_slices.broker_slice(broker.node_id), pid)


def _prepare_testbed(config: StackConfig, progress) -> None:
    """Each log dir on a drive of the design's bandwidth, and a CPU slice per broker and one for the load."""
    testbed = config.testbed
    drives.require_root()
    progress(f"testbed {testbed.design} at 1/{testbed.scale:g}: brokers {testbed.broker_cpu_cores:.2f} cores each, "
             + (f"drives {testbed.drive_bytes_per_s / 1e6:.1f} MB/s with {testbed.dirty_bytes_per_drive >> 20} MiB "
                f"dirty pages each" if testbed.drive_bytes_per_s else "drives: this machine's disk")
             + f", the load {testbed.client_cpu_cores:.2f} cores")
    if testbed.drive_bytes_per_s:
        for broker in kafka.brokers(config):
            for log_dir in broker.log_dirs:
                drives.attach(log_dir, testbed.design, testbed.drive_bytes_per_s, testbed.dirty_bytes_per_drive,
                              testbed.drive_size_mb)
    for node_id in config.node_ids:
        cpu_slices.create(config, cpu_slices.broker_slice(node_id), None)
    cpu_slices.create(config, cpu_slices.CLIENTS, testbed.client_cpu_cores)
    cpu_slices.create(config, cpu_slices.COMPILERS, None)


def _remove_testbed(config: StackConfig) -> None:
    for broker in kafka.brokers(config):
        for log_dir in broker.log_dirs:
            drives.detach(log_dir)
    cpu_slices.remove_all(config)


def _start_elasticsearch(config: StackConfig, progress) -> None:
    if elasticsearch.process().is_running():
        return
    require_free_port(config.elasticsearch_port, "elasticsearch http")
    require_free_port(config.elasticsearch_transport_port, "elasticsearch transport")
    elasticsearch.write_config(config)
    progress(f"starting elasticsearch on port {config.elasticsearch_port}")
    elasticsearch.start(config)


def _start_prometheus(config: StackConfig, progress) -> None:
    if prometheus.process().is_running():
        return
    require_free_port(config.prometheus_port, "prometheus")
    prometheus.write_config(config)
    progress(f"starting prometheus on port {config.prometheus_port}")
    prometheus.start(config)



def processes(config: StackConfig) -> list[ManagedProcess]:
    """Every process this stack may have started, brokers first."""
    return [b.process for b in kafka.brokers(config)] + [elasticsearch.process(), prometheus.process()]


@_one_at_a_time
def down(progress=print) -> int:
    """Stop the processes the stack started (PID files); returns how many were stopped."""
    config = current_config()
    if config is None:
        return 0
    stopped = 0
    if config.testbed is not None:  # tearing down is not measured
        for broker in kafka.brokers(config):
            for log_dir in broker.log_dirs:
                drives.lift(log_dir)
    # Elasticsearch and Prometheus first, then brokers together so none waits on a departed quorum.
    for process in reversed(processes(config)):
        if process.stop():
            progress(f"stopped {process.name}")
            stopped += 1
    if config.testbed is not None:
        _remove_testbed(config)
    return stopped


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    port: int
    healthy: bool
    detail: str
    rss_bytes: int = 0


def status(config: StackConfig) -> list[ComponentStatus]:
    health = kafka.cluster_health(config)
    rows = []
    for broker in kafka.brokers(config):
        pid = broker.process.pid()
        in_metadata = broker.node_id in health.brokers_in_metadata
        detail = "in metadata" if in_metadata else (health.error or "missing from metadata")
        detail += f"; log dirs {', '.join(str(d) for d in broker.log_dirs)}"
        if config.testbed is not None and config.testbed.drive_bytes_per_s:
            detail += (f" (drives of {config.testbed.drive_bytes_per_s / 1e6:.1f} MB/s; "
                       f"{config.testbed.broker_cpu_cores:.2f} cores)")
        rows.append(
            ComponentStatus(
                f"kafka-{broker.node_id}",
                pid,
                broker.port,
                pid is not None and in_metadata,
                detail,
                broker.process.rss_bytes(),
            )
        )
    isr_detail = "ISR complete" if not health.under_replicated else f"under-replicated: {health.under_replicated[:5]}"
    if health.off_preferred:  # not unhealthy: the controller moves them within 5 minutes, stalling writers then
        isr_detail += f"; {len(health.off_preferred)} partitions led off their preferred broker"
    listeners = ("listeners TLS, clients by certificate (mutual TLS), ACLs per stage" if config.tls
                 else "listeners PLAINTEXT: no encryption, no authentication")
    rows.append(ComponentStatus("kafka-cluster", None, config.broker_port(1), health.healthy(config.node_ids),
                                f"{isr_detail}; {listeners}"))
    if config.elasticsearch:
        colour = elasticsearch.health(config)
        process = elasticsearch.process()
        rows.append(
            ComponentStatus(
                "elasticsearch",
                process.pid(),
                config.elasticsearch_port,
                colour in ("green", "yellow"),
                f"cluster health {colour or 'unreachable'}; "
                + ("https, a user and role per principal" if config.elasticsearch_tls
                   else "http: no encryption, no authentication"),
                process.rss_bytes(),
            )
        )
    if config.prometheus:
        ready = prometheus.ready(config)
        process = prometheus.process()
        rows.append(
            ComponentStatus(
                "prometheus",
                process.pid(),
                config.prometheus_port,
                ready,
                "ready" if ready else "not ready",
                process.rss_bytes(),
            )
        )
    return rows


def _broker(config: StackConfig, node_id: int) -> kafka.Broker:
    if node_id not in config.node_ids:
        raise UserError(f"broker {node_id}: the stack has brokers {config.node_ids}")
    return kafka.Broker(node_id, config)


def kill_broker(config: StackConfig, node_id: int) -> None:
    if not _broker(config, node_id).process.kill():
        raise UserError(f"broker {node_id} is not running")


def _move_compilers(config: StackConfig) -> None:
    if config.testbed is not None:
        for broker in kafka.brokers(config):
            if (pid := broker.process.pid()) is not None:
                cpu_slices.move_compilers(config, pid)


def start_broker(config: StackConfig, node_id: int, wait: bool = True) -> None:
    broker = _broker(config, node_id)
    if broker.process.is_running():
        raise UserError(f"broker {node_id} is already running")
    broker.require_free_ports()
    broker.write_config()
    _start_broker_process(config, broker)
    if wait:
        wait_until(
            lambda: node_id in kafka.cluster_health(config).brokers_in_metadata,
            KAFKA_START_TIMEOUT_S,
            f"kafka broker {node_id}",
            broker.process,
        )
        _move_compilers(config)


def use_local_identity(command: str | None) -> None:
    """Connect this process, and the processes it starts, to the local stack's Kafka and Elasticsearch as
    `command`'s principal (`security.COMMAND_PRINCIPALS`), unless it was given an identity ($AITAX_KAFKA_TLS,
    $AITAX_ELASTICSEARCH_CREDENTIALS: a pod's Secrets, a user's). A child started here picks its own: a variable
    says the identity was only the local default. A child whose state folder has no stack (a test's or an
    experiment's own $AITAX_HOME) takes its principal's folder beside the one it inherited: the same stack's."""
    import os
    from pathlib import Path

    from aitax.pipeline.transport.security import TLS_ENV
    from aitax.telemetry.elastic_access import CREDENTIALS_ENV

    principal = security.COMMAND_PRINCIPALS.get(command or "", security.ADMIN)
    config = current_config()
    for variable, secured in ((TLS_ENV, config is not None and config.tls),
                              (CREDENTIALS_ENV, config is not None and config.elasticsearch_tls)):
        given = os.environ.get(variable)
        if given and not os.environ.get(local_marker(variable)):
            continue
        os.environ.pop(variable, None)
        os.environ.pop(local_marker(variable), None)
        if config is not None:
            folder = security.identity(principal) if secured else None
        else:
            folder = Path(given).parent / principal if given else None
        if folder is not None and folder.is_dir():
            os.environ[variable] = str(folder)
            os.environ[local_marker(variable)] = principal


def resolve_bootstrap(explicit: str | None) -> str:
    """Brokers to use: `--bootstrap`, else $AITAX_BOOTSTRAP (set in pods), else the local stack's."""
    import os

    if explicit:
        return explicit
    if os.environ.get("AITAX_BOOTSTRAP"):
        return os.environ["AITAX_BOOTSTRAP"]
    config = current_config()
    if config is None:
        raise UserError("no Kafka brokers known: pass --bootstrap HOST:PORT or run `aitax stack up`")
    return config.bootstrap_servers


@_one_at_a_time
def reshape_kafka(config: StackConfig, brokers: int, log_dirs_per_broker: int, progress=print) -> StackConfig:
    """Restart Kafka alone with another broker count or log dirs per broker, on fresh storage (experiments
    like the paper's Fig. 15); Elasticsearch and Prometheus keep running."""
    import shutil

    for broker in kafka.brokers(config):
        broker.process.stop()
        prometheus.unregister_target(broker.metrics_target)  # a broker that is not coming back is not "down"
    shutil.rmtree(stack_dir() / "kafka", ignore_errors=True)
    reshaped = replace(config, brokers=brokers, log_dirs_per_broker=log_dirs_per_broker)
    reshaped.save(description_file())
    progress(f"restarting Kafka with {brokers} brokers x {log_dirs_per_broker} log dirs")
    return up(reshaped, progress)


def default_events() -> str:
    """Where stage events go by default: the local stack's Elasticsearch when it runs one, else nowhere."""
    config = current_config()
    return f"es:{config.elasticsearch_url}" if config is not None and config.elasticsearch else "none"


def local_scrape_targets() -> Path | None:
    """The local Prometheus's file-SD folder while it runs: stage processes announce their /metrics there."""
    from aitax.stack import prometheus

    config = current_config()
    running = config is not None and config.prometheus and prometheus.process().is_running()
    return prometheus.targets_dir() if running else None


def local_elasticsearch_url(missing: str = "--es") -> str:
    """The local stack's Elasticsearch, for commands whose `missing` option was left out."""
    config = current_config()
    if config is None or not config.elasticsearch:
        raise UserError(f"no {missing} given and no local stack with Elasticsearch: `aitax stack up` first")
    return config.elasticsearch_url
