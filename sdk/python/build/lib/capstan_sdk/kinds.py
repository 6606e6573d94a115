"""Kubernetes kinds as API discovery reports them: group, version, kind, plural, scope."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class KindRef:
    """One served API kind. ``group`` is empty for the core group."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group, as in ``apiVersion``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def is_(self, api_version: str, kind: str) -> bool:
        """True for this ``apiVersion`` and ``kind``."""
        if kind != self.kind:
            return False
        group, slash, version = api_version.rpartition("/")
        if slash:
            return group == self.group and version == self.version
        return not self.group and api_version == self.version

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """True when an object's ``apiVersion`` and ``kind`` name this kind."""
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        return isinstance(api_version, str) and isinstance(kind, str) and self.is_(api_version, kind)

    def new(self, name: str | None = None, namespace: str | None = None) -> dict[str, Any]:
        """A fresh object of this kind: ``apiVersion``, ``kind`` and the names given."""
        metadata: dict[str, Any] = {}
        if name is not None:
            metadata["name"] = name
        if namespace is not None:
            metadata["namespace"] = namespace
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata}


# The built-in kinds plugins use most; any other is a KindRef away. Plurals and scopes
# are the API server's, which the host checks declared kinds against.
CONFIG_MAP = KindRef("", "v1", "ConfigMap", "configmaps")
SECRET = KindRef("", "v1", "Secret", "secrets")
SERVICE = KindRef("", "v1", "Service", "services")
SERVICE_ACCOUNT = KindRef("", "v1", "ServiceAccount", "serviceaccounts")
POD = KindRef("", "v1", "Pod", "pods")
PERSISTENT_VOLUME_CLAIM = KindRef("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims")
NAMESPACE = KindRef("", "v1", "Namespace", "namespaces", namespaced=False)
JOB = KindRef("batch", "v1", "Job", "jobs")
CRON_JOB = KindRef("batch", "v1", "CronJob", "cronjobs")
DEPLOYMENT = KindRef("apps", "v1", "Deployment", "deployments")
STATEFUL_SET = KindRef("apps", "v1", "StatefulSet", "statefulsets")
DAEMON_SET = KindRef("apps", "v1", "DaemonSet", "daemonsets")
INGRESS = KindRef("networking.k8s.io", "v1", "Ingress", "ingresses")
NETWORK_POLICY = KindRef("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies")
ROLE = KindRef("rbac.authorization.k8s.io", "v1", "Role", "roles")
ROLE_BINDING = KindRef("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings")
CLUSTER_ROLE = KindRef("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False)
