"""`aitax experiment`: run a phased experiment spec on Kubernetes or on the local stack, or just check it."""

from __future__ import annotations

import argparse
from pathlib import Path

from aitax.commands.options import add_schema_action, write_schema


def register(subparsers: argparse._SubParsersAction) -> None:
    experiment = subparsers.add_parser(
        "experiment", help="phased experiments: replicas per stage, acceleration factor, duration",
        description="A spec (YAML) lists phases; each sets replicas per stage (ingest-detect, identify, kafka, or "
                    "the emulator's), an acceleration factor and a duration. See docs/kubernetes.md.")
    actions = experiment.add_subparsers(dest="experiment_action", metavar="ACTION", required=True)

    run = actions.add_parser(
        "run", help="run every phase, collect results, restore the original scale",
        description="Each phase runs through the load engine, as `aitax run` does, and keeps its RunResult. "
                    "kubernetes: scales the chart's Deployments/StatefulSet through the API server (like "
                    "`kubectl scale`), consumers first and ready once their group holds every partition, producers "
                    "for the duration, then to zero; the run is read back by `aitax collect` in a consumer pod; "
                    "the original replica counts are restored at the end. local: runs each phase as processes "
                    "against the local stack.")
    run.add_argument("spec", type=Path, help="experiment spec (YAML)")
    run.add_argument("--backend", choices=("local", "kubernetes"), required=True)
    run.add_argument("--elasticsearch", metavar="URL",
                     help="read phase results from this Elasticsearch (default: local backend: the local stack's; "
                          "kubernetes: none, e.g. a `kubectl port-forward` URL)")
    run.add_argument("--out", type=Path, help="folder for the results JSON (default .aitax/experiments)")
    run.add_argument("--repeat", type=int, default=1,
                     help="run the phases this many times over; each phase ends with its median and min-max")
    k8s = run.add_argument_group("kubernetes backend")
    k8s.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
    k8s.add_argument("--context", help="kubeconfig context (default: the current one)")
    k8s.add_argument("--namespace", help="namespace (default: the spec's, else the context's)")
    k8s.add_argument("--release", help="Helm release whose workloads are scaled (default: the spec's, else aitax)")
    k8s.add_argument("--rollout-timeout", type=float, default=300.0, help="seconds per rollout (default 300)")
    local = run.add_argument_group("local backend")
    local.add_argument("--bootstrap", help="Kafka brokers (default: $AITAX_BOOTSTRAP or the local stack)")
    run.set_defaults(func=_run)

    validate = actions.add_parser("validate", help="check a spec and print its phases; changes nothing")
    validate.add_argument("spec", type=Path)
    validate.set_defaults(func=_validate)

    add_schema_action(actions, "experiment spec", "docs/experiment-spec.schema.json", _schema)


def _schema(args: argparse.Namespace) -> int:
    from aitax.experiment.spec import spec_json_schema

    return write_schema(spec_json_schema(), args.out)


def _validate(args: argparse.Namespace) -> int:
    from aitax.experiment.spec import load_spec

    spec = load_spec(args.spec)
    print(f"{spec.source}: experiment {spec.name} (mode {spec.mode}), {len(spec.phases)} phases, "
          f"{spec.total_duration_s:g} s in all")
    for phase in spec.phases:
        replicas = ", ".join(f"{stage}={count}" for stage, count in phase.replicas.items())
        print(f"  {phase.name:<20} {phase.duration_s:>8g} s  factor {phase.factor:<5g} {replicas}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from aitax.experiment.runner import run_experiment
    from aitax.experiment.spec import load_spec
    from common.errors import UserError
    from common.paths import aitax_home

    if args.repeat < 1:
        raise UserError(f"--repeat {args.repeat}: at least 1")
    spec = load_spec(args.spec)
    if args.release:
        spec = replace(spec, release=args.release)
    elasticsearch = args.elasticsearch
    if args.backend == "kubernetes":
        from aitax.experiment.kubernetes_api import KubernetesCluster
        from aitax.experiment.kubernetes_backend import KubernetesBackend

        cluster = KubernetesCluster(args.kubeconfig, args.context, args.namespace or spec.namespace)
        backend = KubernetesBackend(spec, cluster, rollout_timeout_s=args.rollout_timeout)
    else:
        from aitax.experiment.local_backend import LocalBackend

        if elasticsearch is None:
            from stack.stack import current_config

            config = current_config()
            elasticsearch = config.elasticsearch_url if config is not None and config.elasticsearch else None
        events = f"es:{elasticsearch}" if elasticsearch else None
        backend = LocalBackend(spec, bootstrap=args.bootstrap, events=events)
    results, out_file = run_experiment(spec, backend, elasticsearch, args.out or aitax_home() / "experiments",
                                       repeats=args.repeat)
    print(f"{len(results)} phase(s) done; results in {out_file}")
    return 0
