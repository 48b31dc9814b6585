"""The Helm chart against the real local kube-apiserver: lint, server-side dry-run of the rendered
manifests, a real `helm install`, and the chart's RBAC evaluated *as its ServiceAccount* (a
TokenRequest token in a kubeconfig of its own): it can do what the operator does and nothing else.

There is no container runtime (kwok nodes), so the operator Deployment is never really running
here; these tests assert objects and permissions. Running the operator process with the
ServiceAccount's token uses ``tests.support.helm.service_account_kubeconfig``.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tests.support.cluster import kubectl
from tests.support.helm import (
    CHART,
    Installed,
    by_kind,
    can_i,
    fullname,
    helm,
    helm_binary,
    kubectl_as,
    release_name,
    render,
    service_account_kubeconfig,
    template,
)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(helm_binary() is None and not os.environ.get("CI"),
                                 reason="no helm binary (devcluster/build.sh builds one); "
                                        "under CI=true the tests fail instead")]


def _dry_run_server(manifests: str) -> str:
    proc = kubectl("apply", "--dry-run=server", "-f", "-", stdin=manifests, check=False)
    assert proc.returncode == 0, f"server rejected the rendered chart:\n{proc.stderr}\n{proc.stdout}"
    return proc.stdout


def test_helm_lint():
    proc = helm("lint", str(CHART), "--strict", "--kube-version", "1.36.0", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout
    # Each optional feature lints too.
    proc = helm("lint", str(CHART), "--strict", "--kube-version", "1.36.0", "--set", "serviceMonitor.enabled=true",
                "--set", "podMonitor.enabled=true", "--set-json", 'watchNamespaces=["a","b"]', check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rendered_chart_is_accepted_by_the_api_server(cluster, namespace):
    """`kubectl apply --dry-run=server`: admission, defaulting and the OpenAPI schema of every object.

    The monitoring.coreos.com CRDs are not installed in the local cluster, so the monitors stay
    disabled here (tests/unit/test_chart.py checks their rendering).
    """
    release = release_name()
    out = template(release, namespace).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
            "Service", "Deployment"} <= kinds
    result = _dry_run_server(out)
    assert f"deployment.apps/{fullname(release)} created (server dry run)" in result
    # The namespaced variant (Role/RoleBinding in the watched namespace).
    out = template(release, namespace, values={"watchNamespaces": [namespace]}).stdout
    result = _dry_run_server(out)
    assert f"role.rbac.authorization.k8s.io/{fullname(release)} created (server dry run)" in result


def test_helm_install_creates_every_object(cluster, crds, namespace):
    with Installed(cluster, namespace) as inst:
        name = fullname(inst.release)
        assert "The DataParallelJob operator is installed" in inst.notes
        status = json.loads(helm("status", inst.release, "-n", namespace, "-o", "json", kubeconfig=cluster).stdout)
        assert status["info"]["status"] == "deployed"
        kubectl("get", "crd", "dataparalleljobs.dpjob.io")
        for kind in ("serviceaccount", "deployment", "service", "configmap"):
            kubectl("get", kind, name if kind not in ("service", "configmap") else
                    {"service": f"{name}-metrics", "configmap": f"{name}-config"}[kind], "-n", namespace)
        kubectl("get", "clusterrole", name)
        kubectl("get", "clusterrolebinding", name)
        dep = json.loads(kubectl("get", "deployment", name, "-n", namespace, "-o", "json").stdout)
        assert dep["spec"]["strategy"]["type"] == "RollingUpdate" and dep["spec"]["replicas"] == 1
        kubectl("get", "role", f"{name}-leader-election", "-n", namespace)
        kubectl("get", "rolebinding", f"{name}-leader-election", "-n", namespace)
        dashboards = json.loads(kubectl("get", "configmap", "-n", namespace, "-l", "grafana_dashboard=1",
                                        "-o", "json").stdout)["items"]
        assert sorted(next(iter(cm["data"])) for cm in dashboards) == ["dpjob-operator.json", "dpjob-training.json"]
        cfg = json.loads(kubectl("get", "configmap", f"{name}-config", "-n", namespace, "-o",
                                 "jsonpath={.data.config\\.json}").stdout)
        assert cfg["pools"]["gpu"]["deviceResource"] == "nvidia.com/gpu" and cfg["namespaces"] == []
    # Uninstall removed the cluster-scoped RBAC.
    assert kubectl("get", "clusterrole", name, check=False).returncode != 0


def test_service_account_rbac_is_enough_and_least_privilege(cluster, crds, namespace, tmp_path):
    with Installed(cluster, namespace) as inst:
        sa = fullname(inst.release)
        kc = service_account_kubeconfig(namespace, sa, tmp_path / "sa.kubeconfig")
        who = json.loads(kubectl_as(kc, "auth", "whoami", "-o", "json").stdout)
        assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:{sa}"

        allowed = [  # what operator/dpjob_operator/k8s/client.py and kopf do, cluster-wide
            ("create", "pods", None), ("delete", "pods", None), ("get", "pods", None), ("list", "pods", None),
            ("watch", "pods", None), ("get", "nodes", None), ("list", "nodes", None), ("watch", "nodes", None),
            ("create", "services", namespace), ("get", "services", namespace),
            ("create", "configmaps", namespace), ("get", "configmaps", namespace),
            ("patch", "configmaps", namespace), ("create", "events", namespace),
            ("list", "dataparalleljobs.dpjob.io", None), ("watch", "dataparalleljobs.dpjob.io", None),
            ("get", "dataparalleljobs.dpjob.io", namespace), ("delete", "dataparalleljobs.dpjob.io", namespace),
        ]
        for verb, resource, ns in allowed:
            assert can_i(kc, verb, resource, ns), f"SA cannot {verb} {resource} in {ns or 'all namespaces'}"
        assert can_i(kc, "patch", "dataparalleljobs.dpjob.io", namespace, subresource="status")
        assert can_i(kc, "create", "pods", "default"), "cluster-wide install: any namespace"
        # Leader election (k8s/leases.py): its own Lease in the release namespace, nothing more.
        lease = f"leases.coordination.k8s.io/{sa}-leader"
        assert can_i(kc, "create", "leases.coordination.k8s.io", namespace)
        assert can_i(kc, "get", lease, namespace) and can_i(kc, "update", lease, namespace)
        for verb, resource, ns in (("create", "leases.coordination.k8s.io", "default"),
                                   ("update", "leases.coordination.k8s.io/kube-scheduler", namespace),
                                   ("list", "leases.coordination.k8s.io", namespace),
                                   ("delete", lease, namespace), ("get", f"{lease}", "kube-system")):
            assert not can_i(kc, verb, resource, ns), f"SA may {verb} {resource} in {ns}"

        denied = [
            ("create", "secrets", namespace), ("get", "secrets", namespace), ("list", "secrets", None),
            ("delete", "nodes", None), ("patch", "nodes", None),
            ("patch", "pods", namespace), ("update", "pods", namespace), ("delete", "services", namespace),
            ("delete", "configmaps", namespace), ("create", "dataparalleljobs.dpjob.io", namespace),
            ("patch", "dataparalleljobs.dpjob.io", namespace), ("update", "dataparalleljobs.dpjob.io", namespace),
            ("create", "deployments.apps", namespace),
            ("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
            ("create", "roles.rbac.authorization.k8s.io", namespace), ("escalate", "clusterroles", None),
            ("get", "customresourcedefinitions.apiextensions.k8s.io", None), ("list", "namespaces", None),
        ]
        for verb, resource, ns in denied:
            assert not can_i(kc, verb, resource, ns), f"SA may {verb} {resource} in {ns or 'all namespaces'}"
        for verb, resource, sub in (("create", "serviceaccounts", "token"), ("create", "pods", "exec"),
                                    ("patch", "pods", "status"), ("update", "dataparalleljobs.dpjob.io", "status")):
            assert not can_i(kc, verb, resource, namespace, subresource=sub), f"SA may {verb} {resource}/{sub}"

        # Not only the authorizer's opinion: real requests with the token.
        proc = kubectl_as(kc, "get", "secrets", "-n", namespace, check=False)
        assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), proc.stderr
        proc = kubectl_as(kc, "get", "dataparalleljobs.dpjob.io", "-A", check=False)
        assert proc.returncode == 0, proc.stderr
        proc = kubectl_as(kc, "get", "pods", "-A", "-l", "app.kubernetes.io/managed-by=dpjob-operator", check=False)
        assert proc.returncode == 0, proc.stderr


def test_watch_namespaces_confines_rbac_to_those_namespaces(cluster, crds, namespace, tmp_path):
    with Installed(cluster, namespace, f"watchNamespaces={json.dumps([namespace])}") as inst:
        sa = fullname(inst.release)
        assert kubectl("get", "clusterrole", sa, check=False).returncode != 0
        kubectl("get", "role", sa, "-n", namespace)
        cfg = json.loads(kubectl("get", "configmap", f"{sa}-config", "-n", namespace, "-o",
                                 "jsonpath={.data.config\\.json}").stdout)
        assert cfg["namespaces"] == [namespace]
        kc = service_account_kubeconfig(namespace, sa, tmp_path / "sa.kubeconfig")
        assert can_i(kc, "create", "pods", namespace)
        assert can_i(kc, "watch", "dataparalleljobs.dpjob.io", namespace)
        assert can_i(kc, "patch", "dataparalleljobs.dpjob.io", namespace, subresource="status")
        assert not can_i(kc, "create", "pods", "default")
        assert not can_i(kc, "list", "pods", None), "namespaced install must not list pods cluster-wide"
        assert not can_i(kc, "watch", "dataparalleljobs.dpjob.io", None)


def test_schema_rejects_a_typo_at_install(cluster, namespace):
    proc = helm("install", release_name(), str(CHART), "-n", namespace, "--set", "podMonitor.enable=true",
                kubeconfig=cluster, check=False)
    assert proc.returncode != 0 and "additional properties 'enable' not allowed" in proc.stderr, proc.stderr
    assert not json.loads(helm("list", "-n", namespace, "-o", "json", kubeconfig=cluster).stdout)


def test_rendered_defaults_match_a_server_side_default_roundtrip(cluster, namespace):
    """The rendered Deployment survives server defaulting without changing what we set."""
    objs = render(release_name(), namespace)
    dep = by_kind(objs, "Deployment")[0]
    out = kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(dep)).stdout
    served = json.loads(out)
    c = served["spec"]["template"]["spec"]["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["livenessProbe"]["httpGet"]["port"] == "health"
    # Leader election makes a rolling update safe: the new pod stands by until the old one releases.
    assert served["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1,
                                                                                    "maxUnavailable": 0}}
