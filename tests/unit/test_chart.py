"""The chart's render-time contract (no cluster needed): values.schema.json rejects typos, the
default objects, RBAC and leader election, the monitors render as kube-prometheus-stack expects,
and the config the operator reads matches operator/dpjob_operator/config.py.

Rendering needs a helm binary (built if missing; skipped only outside CI). The CRD:
tests/unit/test_chart_crds.py; the dashboards: tests/unit/test_dashboards.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.helm import by_kind, helm_binary, render, template
from tests.unit.test_chart_kueue import KUEUE_CLUSTER_RULES, KUEUE_RULES

pytestmark = pytest.mark.unit
needs_helm = pytest.mark.skipif(
    helm_binary() is None and not os.environ.get("CI"),
    reason="no helm binary (devcluster/build.sh builds one); under CI=true the tests fail instead")


@needs_helm
@pytest.mark.parametrize("bad", ["imagee.tag=x", "podMonitor.enable=true", "pools.gpu.deviceResorce=x",
                                 "serviceMonitor.additionalLabel.release=kps",
                                 "leaderElection.enabled=false,replicaCount=2", "leaderElection.enable=true",
                                 "logLevel=verbose", "pools.tpu.defaultBackend=nccl",
                                 "controllerName=no-domain"])
def test_values_schema_rejects_typos(bad: str):
    proc = template(set_=[bad], check=False)
    assert proc.returncode != 0, f"--set {bad} was accepted"
    assert "schema" in proc.stderr.lower() or "values don't meet" in proc.stderr.lower(), proc.stderr


@needs_helm
def test_default_render():
    objs = render()
    kinds = sorted(o["kind"] for o in objs)
    # The metrics gate adds a reader ClusterRole, ServiceAccount, token Secret and binding, and the
    # operator's system:auth-delegator binding (tests/unit/test_chart_metrics_auth.py); leader
    # election its Lease FlowSchema (tests/unit/test_chart_leader_election.py); the CRD is a
    # template (tests/unit/test_chart_crds.py).
    assert kinds == sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment",
                            "Service", "ConfigMap", "ConfigMap", "Role", "RoleBinding",
                            "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ServiceAccount",
                            "Secret", "FlowSchema", "CustomResourceDefinition", "NetworkPolicy"]), kinds
    dep = by_kind(objs, "Deployment")[0]
    assert dep["spec"]["replicas"] == 1
    # Leader election is on: an upgrade starts the new pod as a standby before the old one stops.
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http-metrics": 8080, "health": 8081}
    downward = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e}
    assert downward == {"DPJOB_POD_NAME": "metadata.name", "DPJOB_POD_NAMESPACE": "metadata.namespace"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert env["DPJOB_CONFIG"].startswith("/etc/dpjob/") and mounts["/etc/dpjob"] == "config"
    assert mounts["/tmp"] == "tmp"
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]
    svc = by_kind(objs, "Service")[0]
    assert svc["spec"]["ports"][0]["name"] == "http-metrics" and svc["spec"]["ports"][0]["port"] == 8080


@needs_helm
def test_operator_config_is_what_config_py_reads(tmp_path: Path):
    from dpjob_operator.config import DEFAULT_POOLS, load_config

    objs = render(values={"watchNamespaces": ["team-a", "team-b"], "apiQPS": 50, "apiBurst": 75,
                          "createConcurrency": 16, "workers": 4, "logLevel": "DEBUG", "resyncSeconds": 45,
                          "metrics": {"port": 9100},
                          "pools": {"gpu": {"deviceResource": "nvidia.com/mig-1g.10gb",
                                            "nodeSelector": {"pool": "a100", "nvidia.com/gpu.present": None},
                                            "tolerations": [],
                                            "defaultBackend": "nccl", "env": {"NCCL_DEBUG": "WARN"}}}})
    cm = next(o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].endswith("-config"))
    path = tmp_path / "config.json"
    path.write_text(cm["data"]["config.json"])
    cfg = load_config(str(path), environ={})
    assert cfg.namespaces == ("team-a", "team-b")
    assert (cfg.api_qps, cfg.api_burst, cfg.create_concurrency, cfg.workers) == (50.0, 75, 16, 4)
    assert (cfg.log_level, cfg.resync_seconds, cfg.metrics_port, cfg.health_port) == ("DEBUG", 45.0, 9100, 8081)
    assert cfg.cluster_domain == "cluster.local"
    gpu = cfg.pools["gpu"]
    # Helm merges maps with the defaults; null removes a default key, lists replace.
    assert gpu.device_resource == "nvidia.com/mig-1g.10gb" and dict(gpu.node_selector) == {"pool": "a100"}
    assert gpu.tolerations == ()
    assert dict(gpu.env) == {"NCCL_DEBUG": "WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    # Pools not overridden keep the chart defaults, which equal the operator's built-in defaults.
    assert cfg.pools["npu"] == DEFAULT_POOLS["npu"]
    assert cfg.pools["cpu"] == DEFAULT_POOLS["cpu"]
    dep = by_kind(objs, "Deployment")[0]
    ports = {p["name"]: p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports["http-metrics"] == 9100


@needs_helm
def test_default_pools_equal_operator_defaults(tmp_path: Path):
    from dpjob_operator.config import DEFAULT_POOLS, load_config

    cm = next(o for o in by_kind(render(), "ConfigMap") if o["metadata"]["name"].endswith("-config"))
    path = tmp_path / "config.json"
    path.write_text(cm["data"]["config.json"])
    cfg = load_config(str(path), environ={})
    assert dict(cfg.pools) == DEFAULT_POOLS
    assert cfg.namespaces == ()


@needs_helm
def test_watch_namespaces_render_roles_not_clusterroles():
    objs = render(values={"watchNamespaces": ["team-a", "team-b"]})
    # Cluster-scoped: only the metrics gate's (TokenReview and SubjectAccessReview are cluster-wide) and
    # the Kueue integration's reads (ResourceFlavors, priority classes: tests/unit/test_chart_kueue.py);
    # with metrics.auth=none and Kueue off a namespaced install needs no cluster-scoped RBAC at all.
    assert sorted(r["metadata"]["name"] for r in by_kind(objs, "ClusterRole")) == [
        "dpjob-dpjob-operator-kueue", "dpjob-dpjob-operator-metrics-reader"]
    assert {b["roleRef"]["name"] for b in by_kind(objs, "ClusterRoleBinding")} == {
        "system:auth-delegator", "dpjob-dpjob-operator-metrics-reader", "dpjob-dpjob-operator-kueue"}
    opened = render(values={"watchNamespaces": ["team-a"], "metrics": {"auth": "none"},
                            "kueue": {"integration": "disabled"}})
    assert not by_kind(opened, "ClusterRoleBinding")
    roles = [r for r in by_kind(objs, "Role") if not r["metadata"]["name"].endswith("-leader-election")]
    bindings = [b for b in by_kind(objs, "RoleBinding") if not b["metadata"]["name"].endswith("-leader-election")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for b in bindings:
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "dpjob-dpjob-operator",
                                  "namespace": "dpjob-system"}]


@needs_helm
def test_rbac_rules_are_least_privilege():
    (role,) = [r for r in by_kind(render(), "ClusterRole") if r["metadata"]["name"] == "dpjob-dpjob-operator"]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    expected = {("", "pods", v) for v in ("create", "delete", "get", "list", "watch")}
    expected |= {("", "services", v) for v in ("create", "get")}
    expected |= {("", "configmaps", v) for v in ("create", "get", "patch")}
    expected |= {("", "events", v) for v in ("create", "patch")}
    expected |= {("dpjob.io", "dataparalleljobs", v) for v in ("get", "list", "watch", "delete")}
    # Lost nodes under running gangs (a watch), stuck Terminating ranks on NotReady nodes (never written)
    expected |= {("", "nodes", v) for v in ("get", "list", "watch")}
    expected |= {("", "namespaces", "get")}  # is a running gang's namespace being deleted (never written)
    expected |= {("networking.k8s.io", "networkpolicies", v) for v in ("create", "get", "delete")}  # isolation
    expected |= {("dpjob.io", "dataparalleljobs/status", "patch"),
                 ("dpjob.io", "dataparalleljobs/finalizers", "update")}
    gang = {("scheduling.k8s.io", r, v)
            for r in ("workloads", "podgroups") for v in ("create", "get", "list", "delete")}
    gang.add(("scheduling.k8s.io", "podgroups", "watch"))  # the scheduler's verdicts (controller/gang_verdicts.py)
    assert granted == expected | gang | KUEUE_RULES | KUEUE_CLUSTER_RULES
    assert not any("*" in rule[k] for rule in role["rules"] for k in ("apiGroups", "resources", "verbs"))
    (role,) = [r for r in by_kind(render(set_=["gangScheduling=disabled", "kueue.integration=disabled"]),
                                  "ClusterRole") if r["metadata"]["name"] == "dpjob-dpjob-operator"]
    assert {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]} == expected
    (cm,) = [c for c in by_kind(render(set_=["gangScheduling=disabled"]), "ConfigMap") if "config.json" in c["data"]]
    assert json.loads(cm["data"]["config.json"])["gangScheduling"] == "disabled"


@needs_helm
def test_restart_in_place_can_be_turned_off_for_every_job():
    (cm,) = [c for c in by_kind(render(set_=["restartInPlace=disabled"]), "ConfigMap") if "config.json" in c["data"]]
    assert json.loads(cm["data"]["config.json"])["restartInPlace"] == "disabled"


@needs_helm
def test_leader_election_renders_a_lease_role_in_the_release_namespace(tmp_path: Path):
    from dpjob_operator.config import load_config

    objs = render(values={"watchNamespaces": ["team-a"]})
    (role,) = [r for r in by_kind(objs, "Role") if r["metadata"]["name"] == "dpjob-dpjob-operator-leader-election"]
    (binding,) = [b for b in by_kind(objs, "RoleBinding") if b["roleRef"]["name"] == role["metadata"]["name"]]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "dpjob-system"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "dpjob-dpjob-operator",
                                    "namespace": "dpjob-system"}]
    # create cannot be limited by name; get and update only touch the release's own Lease.
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": ["dpjob-dpjob-operator-leader"], "verbs": ["get", "update"]}]
    # ... which is the Lease the operator campaigns for, in the namespace the downward API gives it.
    (cm,) = [c for c in by_kind(objs, "ConfigMap") if "config.json" in c["data"]]
    path = tmp_path / "config.json"
    path.write_text(cm["data"]["config.json"])
    election = load_config(str(path), environ={"DPJOB_POD_NAMESPACE": "dpjob-system", "DPJOB_POD_NAME": "op-0"},
                           serviceaccount_namespace=tmp_path / "none").leader_election
    assert (election.enabled, election.namespace, election.lease_name) == (True, "dpjob-system",
                                                                           "dpjob-dpjob-operator-leader")
    assert election.identity.startswith("op-0_")


@needs_helm
def test_two_replicas_need_leader_election_and_without_it_the_deployment_recreates(tmp_path: Path):
    from dpjob_operator.config import load_config

    dep = by_kind(render(set_=["replicaCount=2"]), "Deployment")[0]
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate"
    objs = render(set_=["leaderElection.enabled=false"])
    assert by_kind(objs, "Deployment")[0]["spec"]["strategy"] == {"type": "Recreate"}
    assert not by_kind(objs, "Role") and not by_kind(objs, "RoleBinding")
    (cm,) = [c for c in by_kind(objs, "ConfigMap") if "config.json" in c["data"]]
    path = tmp_path / "config.json"
    path.write_text(cm["data"]["config.json"])
    in_a_pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "DPJOB_POD_NAMESPACE": "dpjob-system"}
    assert not load_config(str(path), environ=in_a_pod).leader_election.enabled


@needs_helm
def test_monitors_render_for_kube_prometheus_stack():
    objs = render(set_=["serviceMonitor.enabled=true", "podMonitor.enabled=true",
                        "serviceMonitor.additionalLabels.release=kps", "podMonitor.additionalLabels.release=kps"])
    (sm,) = by_kind(objs, "ServiceMonitor")
    (pm,) = by_kind(objs, "PodMonitor")
    assert sm["apiVersion"] == pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kps" and pm["metadata"]["labels"]["release"] == "kps"
    svc = by_kind(objs, "Service")[0]
    for k, v in sm["spec"]["selector"]["matchLabels"].items():
        assert svc["metadata"]["labels"][k] == v
    assert sm["spec"]["endpoints"][0]["port"] == "http-metrics"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["dpjob-system"]}
    # Trainer pods: the operator labels them and names the trainer's port `metrics`.
    assert pm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "dpjob-operator"}
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"
    targets = {r["targetLabel"]: r["sourceLabels"] for r in ep["relabelings"]}
    assert targets["dpjob_job"] == ["__meta_kubernetes_pod_label_dpjob_io_job_name"]
    # Namespaced install: scrape only the watched namespaces.
    objs = render(set_=["podMonitor.enabled=true"], values={"watchNamespaces": ["team-a"]})
    (pm,) = by_kind(objs, "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def test_operator_pods_name_the_metrics_port():
    """The PodMonitor selects port `metrics`: the operator must add it to the trainer container."""
    from dpjob_operator.builders import pods

    assert pods.METRICS_PORT == 9090
    source = Path(pods.__file__).read_text()
    assert '"name": "metrics"' in source


@needs_helm
def test_monitors_off_by_default():
    objs = render()
    assert not by_kind(objs, "ServiceMonitor") and not by_kind(objs, "PodMonitor")


def test_token_kubeconfig_keeps_only_server_ca_and_token(tmp_path: Path):
    """tests/support/helm.py: the ServiceAccount kubeconfig carries no admin credential."""
    import base64

    import yaml

    from tests.support.helm import write_token_kubeconfig

    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n")
    base = tmp_path / "admin.kubeconfig"
    base.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "dev",
                      "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority": str(ca)}}],
        "users": [{"name": "admin", "user": {"token": "ADMIN-SECRET"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "admin", "namespace": "default"}}],
        "current-context": "dev"}))
    out = write_token_kubeconfig(base, "SA-TOKEN", "ns1", "op", tmp_path / "sa" / "kubeconfig")
    text = out.read_text()
    assert "ADMIN-SECRET" not in text and oct(out.stat().st_mode & 0o777) == "0o600"
    cfg = yaml.safe_load(text)
    (cluster,) = cfg["clusters"]
    assert cluster["cluster"] == {"server": "https://127.0.0.1:6443",
                                  "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode()}
    (user,) = cfg["users"]
    assert user == {"name": "system:serviceaccount:ns1:op", "user": {"token": "SA-TOKEN"}}
    assert cfg["contexts"][0]["context"]["namespace"] == "ns1" and cfg["current-context"] == "op"


@needs_helm
def test_network_policies_are_on_by_default_and_one_switch_turns_them_off():
    objs = render()
    (policy,) = by_kind(objs, "NetworkPolicy")  # the operator's own pod: its metrics and health ports only
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [8080, 8081]
    (cm,) = [c for c in by_kind(objs, "ConfigMap") if "config.json" in c["data"]]
    cfg = json.loads(cm["data"]["config.json"])
    assert cfg["networkPolicy"] == "enabled"
    operator_peer, prometheus = cfg["networkPolicyMetricsFrom"]  # the operator reads rank 0's progress
    assert operator_peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "dpjob-system"}}
    assert prometheus["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    off = render(set_=["networkPolicy.enabled=false"])
    assert not by_kind(off, "NetworkPolicy")
    (cm,) = [c for c in by_kind(off, "ConfigMap") if "config.json" in c["data"]]
    assert json.loads(cm["data"]["config.json"])["networkPolicy"] == "disabled"
    (role,) = [r for r in by_kind(off, "ClusterRole") if r["metadata"]["name"] == "dpjob-dpjob-operator"]
    assert not any("networkpolicies" in rule["resources"] for rule in role["rules"])
