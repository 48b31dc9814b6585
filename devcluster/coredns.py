"""Cluster DNS for the real nodes: CoreDNS as kubeadm deploys it, non-root on port 1053 behind the
kube-dns ClusterIP that every kubelet's ``clusterDNS`` names. Pure; devcluster/real_nodes.py
applies the manifests. Standard library only.
"""

from __future__ import annotations

from devcluster.realnode_layout import CLUSTER_DOMAIN, DNS_SERVICE_IP, TOLERATION


def corefile() -> str:
    return f""".:1053 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    forward . /etc/resolv.conf
    cache 5
}}
"""


def coredns_container(image: str) -> dict:
    return {
        "name": "coredns", "image": image, "imagePullPolicy": "IfNotPresent",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [{"name": "dns", "containerPort": 1053, "protocol": "UDP"},
                  {"name": "dns-tcp", "containerPort": 1053, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "170Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10,
                          "failureThreshold": 5},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}]}


def coredns_deployment(image: str, node_selector: dict[str, str], labels: dict[str, str]) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "serviceAccountName": "coredns", "dnsPolicy": "Default", "priorityClassName":
                         "system-cluster-critical", "nodeSelector": node_selector, "tolerations": [TOLERATION],
                         "securityContext": {"runAsNonRoot": True, "runAsUser": 65535, "runAsGroup": 65535,
                                             "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [coredns_container(image)],
                         "volumes": [{"name": "config", "configMap": {"name": "coredns"}}]}}}}


def coredns_manifests(image: str, node_selector: dict[str, str]) -> list[dict]:
    """CoreDNS as kubeadm deploys it, non-root on port 1053 behind the kube-dns ClusterIP."""
    labels = {"k8s-app": "kube-dns"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": "kube-system"},
         "data": {"Corefile": corefile()}},
        coredns_deployment(image, node_selector, labels),
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
         "spec": {"clusterIP": DNS_SERVICE_IP, "selector": labels,
                  "ports": [{"name": "dns", "port": 53, "targetPort": 1053, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "targetPort": 1053, "protocol": "TCP"}]}},
    ]
