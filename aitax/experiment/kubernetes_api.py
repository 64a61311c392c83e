"""The Kubernetes API calls an experiment makes, over the official Python client: find the chart's workloads by
their labels (`app.kubernetes.io/instance=<release>`, `app.kubernetes.io/component=<stage>`, so any release name
or fullnameOverride works), scale them, set their environment, wait for rollouts, run the rebalance Job, list pods,
and exec a command in one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aitax.common.daemons import poll_until
from aitax.common.errors import UserError
from aitax.experiment.spec import KAFKA

INSTANCE_LABEL = "app.kubernetes.io/instance"  # the chart's labels: a workload is found by release and stage
COMPONENT_LABEL = "app.kubernetes.io/component"
REBALANCE_COMPONENT = "kafka-rebalance"
REBALANCE_COMMAND = "/opt/kafka/bin/kafka-rebalance-topics"
ADMIN_MOUNT = "/etc/aitax/identity"  # the admin identity in the rebalance Job (KAFKA_TLS_DIR)
RUN_ID_ENV = "AITAX_RUN_ID"
FACTOR_ENV = "AITAX_ACCELERATION_FACTOR"
IN_FLIGHT_ENV = "AITAX_IN_FLIGHT"  # emulate-producers' --in-flight: a closed loop
CONSUMER_STAGES = ("identify", "emulate-consumers", "detect", "emulate-detectors", "detect-objects")
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
API_TIMEOUT_S = 10


@dataclass
class Scaled:
    """One scaled object (its stage container's arguments and environment as the chart set them) and what to put
    back afterwards."""

    stage: str
    kind: str  # Deployment | StatefulSet
    name: str
    container: str
    original_replicas: int
    original_env: dict[str, str | None] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    env: dict[str, str | None] = field(default_factory=dict)

    def arg(self, option: str, default: str | None = None) -> str | None:
        """The value the chart gave the stage's `option` (`--group identify` -> identify)."""
        given = [value for name, value in zip(self.args, self.args[1:], strict=False) if name == option]
        return given[-1] if given else default  # the last one, as argparse reads a repeated option

    def __str__(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


def _admin_secret(pod: Any) -> str | None:
    """With TLS on, the brokers mount their identity Secret `<prefix>-broker` as volume `tls`; Kafka's tools
    connect as `<prefix>-admin` beside it (the chart's identities, aitax/stack/security.py)."""
    from aitax.stack.security import ADMIN, BROKER

    broker = next((v.secret.secret_name for v in pod.volumes or [] if v.name == "tls" and v.secret), None)
    if broker is None or not broker.endswith(f"-{BROKER}"):
        return None
    return broker.removesuffix(BROKER) + ADMIN


@dataclass(frozen=True)
class RolloutState:
    desired: int
    ready: int
    updated: int
    current: int
    done: bool


class KubernetesCluster:
    """The API calls the experiment needs, over the official Python client."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None,
                 namespace: str | None = None) -> None:
        from kubernetes import client, config

        try:
            if kubeconfig or context or not _in_cluster():
                config.load_kube_config(config_file=kubeconfig, context=context)
            else:
                config.load_incluster_config()
        except Exception as error:  # missing file, bad context, malformed kubeconfig
            where = kubeconfig or "~/.kube/config ($KUBECONFIG)"
            raise UserError(f"no usable Kubernetes configuration in {where}: {_one_line(error)}") from None
        if namespace is None:
            try:
                _, active = config.list_kube_config_contexts(config_file=kubeconfig)
                namespace = active.get("context", {}).get("namespace") or "default"
            except Exception:
                namespace = "default"
        self.namespace = namespace
        self.api_client = client.ApiClient()
        self.host = self.api_client.configuration.host
        self.apps = client.AppsV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        # Exec gets a client of its own: kubernetes.stream swaps the request function of the client it is given.
        self.exec_core = client.CoreV1Api(client.ApiClient())
        self.version_api = client.VersionApi(self.api_client)

    def check_reachable(self) -> str:
        """The server's version, or a one-line error naming the server (before anything is scaled)."""
        try:
            return self.version_api.get_code(_request_timeout=API_TIMEOUT_S).git_version
        except Exception as error:
            raise UserError(f"Kubernetes API server at {self.host} unreachable: {_one_line(error)}") from None

    def find_workload(self, release: str, stage: str) -> Scaled:
        selector = f"{INSTANCE_LABEL}={release},{COMPONENT_LABEL}={stage}"
        kind, items = ("StatefulSet", self._list_statefulsets(selector)) if stage == KAFKA else \
            ("Deployment", self._list_deployments(selector))
        if not items:
            raise UserError(f"no {kind} with labels {selector} in namespace {self.namespace}: is release {release!r} "
                            f"installed there, with mode matching the spec (stage {stage})?")
        if len(items) > 1:
            names = ", ".join(item.metadata.name for item in items)
            raise UserError(f"several {kind}s match {selector} in namespace {self.namespace}: {names}")
        item = items[0]
        containers = item.spec.template.spec.containers
        container = next((c for c in containers if c.name == stage), containers[0])
        env = {var.name: var.value for var in (container.env or [])}
        return Scaled(stage=stage, kind=kind, name=item.metadata.name, container=container.name,
                      original_replicas=item.spec.replicas or 0,
                      original_env={key: env.get(key) for key in (RUN_ID_ENV, FACTOR_ENV, IN_FLIGHT_ENV)},
                      args=tuple(container.args or ()), env=env)

    def scale(self, workload: Scaled, replicas: int) -> None:
        body = {"spec": {"replicas": replicas}}
        call = self.apps.patch_namespaced_stateful_set_scale if workload.kind == "StatefulSet" \
            else self.apps.patch_namespaced_deployment_scale
        self._call(f"scaling {workload} to {replicas}", call, workload.name, self.namespace, body,
                   _content_type=MERGE)

    def set_env(self, workload: Scaled, env: dict[str, str | None]) -> None:
        """Set (or, for None, remove) environment variables of the stage's container: a new rollout."""
        entries: list[dict[str, Any]] = [
            {"name": key, "value": value} if value is not None else {"name": key, "$patch": "delete"}
            for key, value in env.items()
        ]
        body = {"spec": {"template": {"spec": {"containers": [{"name": workload.container, "env": entries}]}}}}
        self._call(f"updating {workload}", self.apps.patch_namespaced_deployment, workload.name, self.namespace,
                   body, _content_type=STRATEGIC_MERGE)

    def rollout_state(self, workload: Scaled) -> RolloutState:
        read = self.apps.read_namespaced_stateful_set if workload.kind == "StatefulSet" \
            else self.apps.read_namespaced_deployment
        item = self._call(f"reading {workload}", read, workload.name, self.namespace)
        status = item.status
        desired = item.spec.replicas or 0
        ready = status.ready_replicas or 0
        updated = status.updated_replicas or 0
        current = status.replicas or 0
        observed = (status.observed_generation or 0) >= (item.metadata.generation or 0)
        if workload.kind == "StatefulSet":
            revision_done = desired == 0 or status.current_revision == status.update_revision or updated == desired
        else:
            revision_done = updated == desired and (status.available_replicas or 0) == desired
        # current == desired: pods of the old revision (or beyond the new count) are gone too.
        done = observed and revision_done and ready == desired and current == desired
        return RolloutState(desired, ready, updated, current, done)

    def wait_rollouts(self, workloads: list[Scaled], timeout_s: float, poll_s: float = 0.5) -> dict[str, int]:
        """Wait until every workload runs its desired replicas of its newest template; return ready counts."""
        states: dict[str, RolloutState] = {}

        def done() -> bool:
            states.update({w.stage: self.rollout_state(w) for w in workloads})
            return all(s.done for s in states.values())

        if not poll_until(done, timeout_s, poll_s):
            pending = "; ".join(f"{w}: {states[w.stage].ready}/{states[w.stage].desired} ready, "
                                f"{states[w.stage].updated} updated, {states[w.stage].current} running"
                                for w in workloads if not states[w.stage].done)
            consumers = [w for w in workloads if not states[w.stage].done and w.stage in CONSUMER_STAGES]
            hint = (" A consumer pod is ready once each of its instances holds partitions: the faces topic needs at "
                    "least (pods + the rollout's surge pods) x instances partitions." if consumers else "")
            raise UserError(f"rollout not finished after {timeout_s:.0f} s: {pending} "
                            f"(see `kubectl -n {self.namespace} get pods` and their events).{hint}")
        return {stage: s.ready for stage, s in states.items()}

    def rebalance_job(self, release: str, kafka: Scaled, brokers: int, timeout_s: float) -> dict[str, Any]:
        """A Job that spreads every topic over brokers 0..brokers-1, built from the broker pods' own image,
        security settings and naming (so it passes the chart's NetworkPolicy as a Kafka client)."""
        statefulset = self._call(f"reading {kafka}", self.apps.read_namespaced_stateful_set, kafka.name,
                                 self.namespace)
        pod = statefulset.spec.template.spec
        broker = next((c for c in pod.containers if c.name == kafka.container), pod.containers[0])
        env = {var.name: var.value for var in (broker.env or [])}
        port = next((p.container_port for p in (broker.ports or []) if p.name == "kafka"), 9092)
        pattern = env.get("KAFKA_HOST_PATTERN")
        if not pattern:
            raise UserError(f"{kafka} has no KAFKA_HOST_PATTERN: not the aitax chart's Kafka, cannot rebalance")
        staying = min(brokers, statefulset.spec.replicas or brokers)
        admin = _admin_secret(pod)
        bootstrap = ",".join(f"{pattern.replace('{ordinal}', str(o))}:{port}" for o in range(staying))
        serialize = self.api_client.sanitize_for_serialization
        labels = {INSTANCE_LABEL: release, COMPONENT_LABEL: REBALANCE_COMPONENT,
                  "app.kubernetes.io/managed-by": "aitax-experiment", "aitax/kafka-client": release}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"generateName": f"{kafka.name}-rebalance-{brokers}-", "labels": labels},
            "spec": {
                "backoffLimit": 2,
                "activeDeadlineSeconds": int(timeout_s),
                "ttlSecondsAfterFinished": 3600,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "serviceAccountName": pod.service_account_name,
                        "automountServiceAccountToken": False,
                        "securityContext": serialize(pod.security_context),
                        "imagePullSecrets": serialize(pod.image_pull_secrets),
                        "containers": [{
                            "name": REBALANCE_COMPONENT,
                            "image": broker.image,
                            "imagePullPolicy": broker.image_pull_policy,
                            "command": [REBALANCE_COMMAND, str(brokers)],
                            "env": [{"name": "KAFKA_BOOTSTRAP", "value": bootstrap},
                                    {"name": "KAFKA_WAIT_TIMEOUT_S", "value": str(int(timeout_s))},
                                    {"name": "KAFKA_HEAP_OPTS", "value": "-Xmx256m"},
                                    *([{"name": "KAFKA_TLS_DIR", "value": ADMIN_MOUNT}] if admin else [])],
                            "securityContext": serialize(broker.security_context),
                            "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                                          "limits": {"cpu": "1", "memory": "512Mi"}},
                            # The root filesystem is read-only: the reassignment plan goes to /tmp.
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                                             *([{"name": "identity", "mountPath": ADMIN_MOUNT, "readOnly": True}]
                                               if admin else [])],
                        }],
                        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                                    *([{"name": "identity", "secret": {"secretName": admin, "defaultMode": 0o440}}]
                                      if admin else [])],
                    },
                },
            },
        }

    def run_job(self, body: dict[str, Any], timeout_s: float, poll_s: float = 1.0) -> str:
        """Create a Job and wait until it succeeds; a failed or late Job is an error naming it."""
        job = self._call("creating a rebalance Job", self.batch.create_namespaced_job, self.namespace, body)
        name = job.metadata.name
        failed: list = [None]

        def ended() -> bool:
            status = self._call(f"reading job/{name}", self.batch.read_namespaced_job_status, name,
                                self.namespace).status
            failed[0] = next((c for c in status.conditions or [] if c.type == "Failed" and c.status == "True"), None)
            return (status.succeeded or 0) >= 1 or failed[0] is not None

        if not poll_until(ended, timeout_s, poll_s) or failed[0] is not None:
            why = f"{failed[0].reason}: {failed[0].message}" if failed[0] else f"not done after {timeout_s:.0f} s"
            raise UserError(f"job/{name} in namespace {self.namespace} failed ({why}); see "
                            f"`kubectl -n {self.namespace} logs job/{name}`")
        return name

    def pods(self, selector: str) -> list:
        return self._call("listing pods", self.core.list_namespaced_pod, self.namespace,
                          label_selector=selector).items

    def release_pods(self, release: str, component: str) -> list:
        """The pods of one of the chart's components (kafka, emulate-producers, ...) in the release."""
        return self.pods(f"{INSTANCE_LABEL}={release},{COMPONENT_LABEL}={component}")

    def service(self, release: str, component: str) -> str | None:
        """The name of the release's Service of that component, or None when the release has none."""
        items = self._call("listing services", self.core.list_namespaced_service, self.namespace,
                           label_selector=f"{INSTANCE_LABEL}={release},{COMPONENT_LABEL}={component}").items
        return items[0].metadata.name if items else None

    def proxy_get(self, service: str, port: int | str, path: str, params: dict[str, str]) -> str:
        """GET `path` of a Service through the API server's service proxy (no route into the cluster needed)."""
        request = self.api_client.param_serialize(
            "GET", "/api/v1/namespaces/{namespace}/services/{name}/proxy/" + path,
            path_params={"namespace": self.namespace, "name": f"{service}:{port}"},
            query_params=list(params.items()), auth_settings=["BearerToken"])
        response = self._call(f"GET {path} of service/{service}", self.api_client.call_api, *request)
        response.read()
        if response.status != 200:
            raise UserError(f"GET {path} of service/{service} in namespace {self.namespace}: {response.status} "
                            f"{response.data.decode(errors='replace')[:200]}")
        return response.data.decode()

    def config_map(self, name: str) -> dict[str, str]:
        return self._call(f"reading configmap/{name}", self.core.read_namespaced_config_map, name,
                          self.namespace).data or {}

    def exec(self, pod: str, container: str, command: list[str], timeout_s: float) -> str:
        """Run `command` in a pod's container through the API server; its stdout, or an error naming the pod and
        the command's last line of stderr."""
        import yaml
        from kubernetes.stream import stream
        from kubernetes.stream.ws_client import ERROR_CHANNEL

        what = f"`{' '.join(command)}` in pod/{pod}"
        response = self._call(f"running {what}", stream, self.exec_core.connect_get_namespaced_pod_exec, pod,
                              self.namespace, container=container, command=command, stdin=False, stdout=True,
                              stderr=True, tty=False, _preload_content=False)
        stdout, stderr = [], []
        deadline = time.monotonic() + timeout_s
        try:
            while response.is_open() and time.monotonic() < deadline:
                response.update(timeout=1)
                stdout.append(response.read_stdout() if response.peek_stdout() else "")
                stderr.append(response.read_stderr() if response.peek_stderr() else "")
            if response.is_open():
                raise UserError(f"{what} in namespace {self.namespace}: not done after {timeout_s:.0f} s")
            # The API server ends every exec with a status; none means the stream broke off.
            status = yaml.safe_load(response.read_channel(ERROR_CHANNEL) or "{}") or {
                "status": "Failure", "message": "the exec stream closed without an exit status"}
        except (UserError, KeyboardInterrupt):
            raise
        except Exception as error:  # the websocket reset, closed or unreadable mid-command
            raise UserError(f"{what} in namespace {self.namespace}: {_one_line(error)}") from None
        finally:
            response.close()
        if not isinstance(status, dict):
            status = {"status": "Failure", "message": f"unreadable exec status {str(status)[:100]!r}"}
        if status.get("status") != "Success":
            # An exit code is a cause of reason ExitCode; any other failure (no such command, a pod that runs
            # nothing) has only its message.
            details = status.get("details") if isinstance(status.get("details"), dict) else {}
            code = next((c.get("message") for c in details.get("causes") or []
                         if isinstance(c, dict) and c.get("reason") == "ExitCode"), None)
            last = ("".join(stderr).strip().splitlines() or [status.get("message", "no output")])[-1][:300]
            raise UserError(f"{what} in namespace {self.namespace} {f'exited {code}' if code else 'failed'}: {last}")
        return "".join(stdout)

    def _list_deployments(self, selector: str) -> list:
        return self._call("listing deployments", self.apps.list_namespaced_deployment, self.namespace,
                          label_selector=selector).items

    def _list_statefulsets(self, selector: str) -> list:
        return self._call("listing statefulsets", self.apps.list_namespaced_stateful_set, self.namespace,
                          label_selector=selector).items

    def _call(self, what: str, function: Callable, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return function(*args, _request_timeout=API_TIMEOUT_S, **kwargs)
        except ApiException as error:
            raise UserError(f"{what} in namespace {self.namespace} failed: {error.status} {error.reason}: "
                            f"{_api_message(error)}") from None
        except Exception as error:  # connection refused / reset / timeout mid-experiment
            raise UserError(f"{what}: Kubernetes API server at {self.host} unreachable: {_one_line(error)}") from None


def _in_cluster() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")


def _one_line(error: Exception) -> str:
    text = str(error)
    for marker in ("Connection refused", "Name or service not known", "timed out", "No route to host",
                   "certificate verify failed", "Connection reset"):
        if marker in text:
            return marker
    return (text.strip().splitlines() or [type(error).__name__])[0][:200]


def _api_message(error: Any) -> str:
    import json

    try:
        return json.loads(error.body).get("message", "")[:300]
    except (TypeError, ValueError, AttributeError):
        return str(error.reason)
