"""The chart's security, rendered: every stage pod runs as its command's principal (aitax/stack/security.py's
table), the brokers, Kafka's tools and the helm test carry the identities the local stack gives them, the bundled
Elasticsearch has the local stack's security settings, and one hook Job, alone allowed to touch Secrets, makes the
identities."""

from __future__ import annotations

import pytest
import yaml

from aitax.pipeline.transport.security import READER, READER_MOUNT, TLS_ENV
from aitax.stack.elasticsearch import SECURITY_SETTINGS
from aitax.stack.security import ADMIN, BROKER, COMMAND_PRINCIPALS, ELASTICSEARCH
from tests.k8s.conftest import CHART, CI_VALUES, render

pytestmark = pytest.mark.k8s

CONSUMERS = {"identify", "emulate-consumers", "detect-objects"}


def _named(docs: list[dict], kind: str, suffix: str) -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix))


def _secrets(spec: dict) -> dict[str, str]:
    return {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}


def _env(container: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_each_stage_pod_runs_as_its_commands_principal(values) -> None:
    docs = render(values)
    deployments = [d for d in docs if d["kind"] == "Deployment"
                   and d["metadata"]["labels"]["app.kubernetes.io/component"] not in ("dashboard", "prometheus")]
    assert deployments
    bundled = any(d["kind"] == "StatefulSet" and d["metadata"]["name"].endswith("-elasticsearch") for d in docs)
    for deployment in deployments:
        spec = deployment["spec"]["template"]["spec"]
        container = spec["containers"][0]
        principal = COMMAND_PRINCIPALS[container["args"][0]]
        secrets = _secrets(spec)
        assert secrets["identity"] == f"t-aitax-identity-{principal}", deployment["metadata"]["name"]
        env = _env(container)
        assert env["AITAX_KAFKA_TLS"] == "/etc/aitax/identity"
        assert env.get("AITAX_ELASTICSEARCH_CREDENTIALS") == ("/etc/aitax/identity" if bundled else None)
        assert env["AITAX_EVENTS"] == "none" or not bundled or "https://" in env["AITAX_ELASTICSEARCH_URL"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/etc/aitax/identity"]["readOnly"] is True
        if container["name"] in CONSUMERS:  # an experiment's read-back runs here, as the reader
            assert secrets["reader"] == f"t-aitax-identity-{READER}" and READER_MOUNT in mounts
        else:
            assert "reader" not in secrets
        volume = next(v for v in spec["volumes"] if v["name"] == "identity")
        assert volume["secret"]["defaultMode"] == 0o440  # the pod's group (fsGroup) reads it, nobody else


def test_kafka_and_its_tools_carry_the_broker_and_admin_identities() -> None:
    docs = render(CI_VALUES[0])
    brokers = _named(docs, "StatefulSet", "-kafka")["spec"]["template"]["spec"]
    assert _secrets(brokers)["tls"] == f"t-aitax-identity-{BROKER}"
    assert "/etc/kafka/tls" in {m["mountPath"] for m in brokers["containers"][0]["volumeMounts"]}
    job = _named(docs, "Job", "-topics-1")["spec"]["template"]["spec"]
    assert _secrets(job)["identity"] == f"t-aitax-identity-{ADMIN}"
    topics, template = job["containers"]
    # One client creates the topics and grants their ACLs, as the admin: each topic's role says who may use it.
    assert topics["args"][:2] == ["cluster", "ensure-topics"] and _env(topics)[TLS_ENV] == "/etc/aitax/identity"
    granted = [topics["args"][i + 1].split(":")[:3:2] for i, arg in enumerate(topics["args"]) if arg == "--topic"]
    assert granted == [["faces", "faces"], ["identities", "identities"], ["faces.dlq", "dlq"]]
    assert template["args"][:2] == ["events", "template"]
    assert _env(template)["AITAX_ELASTICSEARCH_CREDENTIALS"] == "/etc/aitax/identity"
    probe = next(d for d in docs if d["kind"] == "Pod")["spec"]
    assert _secrets(probe)["identity"] == f"t-aitax-identity-{ADMIN}"
    assert _env(probe["containers"][0])["AITAX_KAFKA_TLS"] == "/etc/aitax/identity"


def test_the_bundled_elasticsearch_has_the_local_stacks_security() -> None:
    docs = render(CI_VALUES[0])
    spec = _named(docs, "StatefulSet", "-elasticsearch")["spec"]["template"]["spec"]
    env = _env(spec["containers"][0])
    assert {key: value for key, value in env.items() if key.startswith("xpack.")} == SECURITY_SETTINGS
    assert _secrets(spec) == {"identity": f"t-aitax-identity-{ELASTICSEARCH}",
                              "realm": "t-aitax-identity-elasticsearch-realm"}
    assert "tcpSocket" in spec["containers"][0]["readinessProbe"]  # every request needs a user
    copy = spec["initContainers"][0]["command"][-1]
    assert "/identity/tls.key /config/certs/" in copy and "/realm/users " in copy


def test_one_hook_job_alone_may_touch_secrets_and_runs_first() -> None:
    docs = render(CI_VALUES[0])
    role = _named(docs, "Role", "-issue-secrets")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "update"]}]
    # The only cluster-scoped objects: the release's Prometheus's read of the kubelets' metrics (on by default)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")] \
        == [("ClusterRole", "aitax-t-aitax-prometheus"), ("ClusterRoleBinding", "aitax-t-aitax-prometheus")]
    job = _named(docs, "Job", "-issue-secrets")
    hooks = {d["metadata"]["name"] + "/" + d["kind"]: d["metadata"].get("annotations", {}) for d in docs
             if "helm.sh/hook" in d["metadata"].get("annotations", {})}
    mine = {name: a for name, a in hooks.items() if "-issue-secrets/" in name}
    assert all(a["helm.sh/hook"] == "pre-install,pre-upgrade" for a in mine.values()) and len(mine) == 4
    others = [int(a.get("helm.sh/hook-weight", "0")) for name, a in hooks.items() if name not in mine]
    assert int(job["metadata"]["annotations"]["helm.sh/hook-weight"]) < min(others, default=0)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:4] == ["cluster", "issue-secrets", "--prefix", "t-aitax-identity"]
    assert "*.t-aitax-kafka-headless.aitax.svc.cluster.local" in args  # every broker's name
    assert "t-aitax-elasticsearch" in args


def test_security_off_renders_the_plaintext_chart() -> None:
    docs = render(CI_VALUES[0], sets=("security.enabled=false",))
    assert not [d for d in docs if "issue-secrets" in d["metadata"]["name"]]
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet", "Job", "Pod"):
            spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
            assert not _secrets(spec), doc["metadata"]["name"]
    identify = _named(docs, "Deployment", "-identify")["spec"]["template"]["spec"]["containers"][0]
    assert _env(identify)["AITAX_ELASTICSEARCH_URL"] == "http://t-aitax-elasticsearch:9200"
    assert "AITAX_KAFKA_TLS" not in _env(identify)


def test_supplied_secrets_need_no_job() -> None:
    docs = render(CHART / "ci" / "production-values.yaml", sets=("security.generateSecrets=false",))
    assert not [d for d in docs if "issue-secrets" in d["metadata"]["name"]]
    identify = _named(docs, "Deployment", "-identify")["spec"]["template"]["spec"]
    assert _secrets(identify)["identity"] == "t-aitax-identity-identify"


def test_the_dashboard_serves_its_own_certificate_and_holds_only_the_readers_elasticsearch_password() -> None:
    docs = render(CI_VALUES[0])
    spec = _named(docs, "Deployment", "-dashboard")["spec"]["template"]["spec"]
    container = spec["containers"][0]
    args = container["args"]
    assert args[0] == "dashboard" and args[args.index("--tls-dir") + 1] == "/etc/aitax/dashboard"
    assert _secrets(spec) == {"dashboard": "t-aitax-identity-dashboard", "reader": f"t-aitax-identity-{READER}"}
    reader = next(v for v in spec["volumes"] if v["name"] == "reader")["secret"]
    assert {item["key"] for item in reader["items"]} == {"username", "password", "ca.crt"}  # no Kafka key
    assert _env(container)["AITAX_ELASTICSEARCH_CREDENTIALS"] == READER_MOUNT
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and spec["automountServiceAccountToken"] \
        is False
    assert _named(docs, "Service", "-dashboard")["spec"]["ports"][0]["name"] == "https"
    issuer = _named(docs, "Job", "-issue-secrets")["spec"]["template"]["spec"]["containers"][0]["args"]
    hosts = [issuer[i + 1] for i, arg in enumerate(issuer) if arg == "--dashboard-host"]
    assert hosts[0].startswith("t-aitax-dashboard.") and "localhost" in hosts


def test_without_security_the_dashboard_serves_plain_http_without_a_login() -> None:
    docs = render(CI_VALUES[0], sets=("security.enabled=false",))
    spec = _named(docs, "Deployment", "-dashboard")["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert args[args.index("--tls-dir") + 1] == "none" and not _secrets(spec)
    assert _named(docs, "Service", "-dashboard")["spec"]["ports"][0]["name"] == "http"
    assert not [d for d in render(CI_VALUES[0], sets=("dashboard.enabled=false",))
                if d["metadata"]["name"].endswith("-dashboard")]


def test_the_releases_prometheus_reads_only_its_targets_and_the_kubelets_metrics() -> None:
    docs = render(CI_VALUES[0], sets=("prometheus.enabled=true", "prometheus.kubelet.port=19650"), namespace="lab")
    # Its token reads the kubelet's metrics and nothing else: no Role, no Secret, no pod, no exec.
    assert not [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-prometheus")]
    cluster_role = _named(docs, "ClusterRole", "-prometheus")
    assert cluster_role["metadata"]["name"] == "lab-t-aitax-prometheus"  # two namespaces' releases never share it
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]}]
    binding = _named(docs, "ClusterRoleBinding", "-prometheus")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "t-aitax-prometheus", "namespace": "lab"}]
    config = yaml.safe_load(_named(docs, "ConfigMap", "-prometheus")["data"]["prometheus.yml"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    discovered = {name: job["dns_sd_configs"][0]["names"] for name, job in jobs.items() if "dns_sd_configs" in job}
    assert discovered == {"brokers": ["_metrics._tcp.t-aitax-kafka-headless.lab.svc.cluster.local"],
                          "broker-disks": ["_disk-metrics._tcp.t-aitax-kafka-headless.lab.svc.cluster.local"],
                          "stages": ["_metrics._tcp.t-aitax-metrics.lab.svc.cluster.local"]}
    cadvisor = jobs["cadvisor"]
    assert cadvisor["static_configs"] == [{"targets": ["@NODE_IP@:19650"]}]  # its own node's kubelet
    assert cadvisor["metrics_path"] == "/metrics/cadvisor" and cadvisor["tls_config"]["insecure_skip_verify"] is False
    assert cadvisor["metric_relabel_configs"] == [{"source_labels": ["namespace", "id"], "regex": "lab;.*|;/?",
                                                   "action": "keep"}]  # this namespace's pods, and the node's totals
    headless = _named(docs, "Service", "-kafka-headless")["spec"]["ports"]
    assert {"name": "metrics", "port": 9404, "targetPort": "metrics"} in headless
    dashboard = _named(docs, "Deployment", "-dashboard")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert dashboard[dashboard.index("--prometheus") + 1] == "http://t-aitax-prometheus:9090"
    spec = _named(docs, "Deployment", "-prometheus")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "t-aitax-prometheus" and spec["securityContext"]["runAsNonRoot"] is True
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["env"] == [{"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]
    # On by default; off, no Prometheus and no cluster-scoped object at all.
    assert _named(render(CI_VALUES[0]), "Deployment", "-prometheus")
    off = render(CI_VALUES[0], sets=("prometheus.enabled=false",))
    assert not [d for d in off if d["metadata"]["name"].endswith("-prometheus")]
    assert not [d for d in off if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
