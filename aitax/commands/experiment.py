"""`aitax experiment`: run a phased experiment spec on Kubernetes or on the local stack, or just check it."""

from __future__ import annotations

from pathlib import Path

import click

from aitax.commands.options import group, schema_command

SPEC = click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))


def register(root: click.Group) -> None:
    root.add_command(experiment_group)


def _spec_json_schema() -> dict:
    from aitax.experiment.spec import spec_json_schema

    return spec_json_schema()


experiment_group = group(
    "experiment", "phased experiments: replicas per stage, acceleration factor, duration",
    "A spec (YAML) lists phases; each sets replicas per stage (ingest-detect, identify, kafka, or the emulator's), an "
    "acceleration factor and a duration. See docs/kubernetes.md.")


@experiment_group.command(
    "run", short_help="run every phase, collect results, restore the original scale",
    help="Each phase runs through the load engine, as `aitax run` does, and keeps its RunResult. kubernetes: scales "
         "the chart's Deployments/StatefulSet through the API server (like `kubectl scale`), consumers first and "
         "ready once their group holds every partition, producers for the duration, then to zero; the run is read "
         "back by `aitax collect` in a consumer pod; the original replica counts are restored at the end. local: "
         "runs each phase as processes against the local stack.\n\nSPEC is the experiment spec (YAML).")
@SPEC
@click.option("--backend", type=click.Choice(("local", "kubernetes")), required=True,
              help="where the phases run: processes against the local stack, or the chart on a cluster")
@click.option("--elasticsearch", metavar="URL",
              help="read phase results from this Elasticsearch (default: local backend: the local stack's; "
                   "kubernetes: none, e.g. a `kubectl port-forward` URL)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="folder for the results JSON (default .aitax/experiments)")
@click.option("--repeat", type=int, default=1,
              help="run the phases this many times over; each phase ends with its median and min-max")
@click.option("--kubeconfig", help="kubernetes backend: kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
@click.option("--context", "kube_context", help="kubernetes backend: kubeconfig context (default: the current one)")
@click.option("--namespace", help="kubernetes backend: namespace (default: the spec's, else the context's)")
@click.option("--release",
              help="kubernetes backend: Helm release whose workloads are scaled (default: the spec's, else aitax)")
@click.option("--rollout-timeout", type=float, default=300.0,
              help="kubernetes backend: seconds per rollout (default 300)")
@click.option("--bootstrap", help="local backend: Kafka brokers (default: $AITAX_BOOTSTRAP or the local stack)")
def run_command(spec: Path, backend: str, elasticsearch: str | None, out: Path | None, repeat: int,
                kubeconfig: str | None, kube_context: str | None, namespace: str | None, release: str | None,
                rollout_timeout: float, bootstrap: str | None) -> int:
    from dataclasses import replace

    from aitax.common.errors import UserError
    from aitax.common.paths import aitax_home
    from aitax.experiment.runner import run_experiment
    from aitax.experiment.spec import load_spec

    if repeat < 1:
        raise UserError(f"--repeat {repeat}: at least 1")
    loaded = load_spec(spec)
    if release:
        loaded = replace(loaded, release=release)
    if backend == "kubernetes":
        from aitax.experiment.kubernetes_api import KubernetesCluster
        from aitax.experiment.kubernetes_backend import KubernetesBackend

        cluster = KubernetesCluster(kubeconfig, kube_context, namespace or loaded.namespace)
        engine = KubernetesBackend(loaded, cluster, rollout_timeout_s=rollout_timeout)
    else:
        from aitax.experiment.local_backend import LocalBackend

        if elasticsearch is None:
            elasticsearch = _local_elasticsearch()
        events = f"es:{elasticsearch}" if elasticsearch else None
        engine = LocalBackend(loaded, bootstrap=bootstrap, events=events)
    results, out_file = run_experiment(loaded, engine, elasticsearch, out or aitax_home() / "experiments",
                                       repeats=repeat)
    print(f"{len(results)} phase(s) done; results in {out_file}")
    return 0


def _local_elasticsearch() -> str | None:
    """The local stack's Elasticsearch URL, if it has one."""
    from aitax.stack.stack import current_config

    config = current_config()
    return config.elasticsearch_url if config is not None and config.elasticsearch else None


@experiment_group.command("validate", short_help="check a spec and print its phases; changes nothing",
                          help="Check a spec and print its phases; changes nothing.")
@SPEC
def validate_command(spec: Path) -> int:
    from aitax.experiment.spec import load_spec

    loaded = load_spec(spec)
    print(f"{loaded.source}: experiment {loaded.name} (mode {loaded.mode}), {len(loaded.phases)} phases, "
          f"{loaded.total_duration_s:g} s in all")
    for phase in loaded.phases:
        replicas = ", ".join(f"{stage}={count}" for stage, count in phase.replicas.items())
        links = f"; links: {phase.links.describe()}" if phase.links else ""
        print(f"  {phase.name:<20} {phase.duration_s:>8g} s  factor {phase.factor:<5g} {replicas}{links}")
    return 0


experiment_group.add_command(schema_command("experiment spec", "docs/experiment-spec.schema.json", _spec_json_schema))
