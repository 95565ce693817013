"""A small asyncio client for the few Kubernetes calls the reconcilers make.

kopf owns the watching; this client only gets, creates, merge-patches and deletes objects.
Merge patches (RFC 7386) keep fields the operator does not set (a Service's clusterIP, a
StatefulSet's status) and are served by every API server, test emulators included.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

KINDS: dict[str, tuple[str, str]] = {
    "ConfigMap": ("api/v1", "configmaps"),
    "Secret": ("api/v1", "secrets"),
    "Service": ("api/v1", "services"),
    "Pod": ("api/v1", "pods"),
    "Node": ("api/v1", "nodes"),
    "Event": ("api/v1", "events"),
    "PersistentVolumeClaim": ("api/v1", "persistentvolumeclaims"),
    "StorageClass": ("apis/storage.k8s.io/v1", "storageclasses"),
    "StatefulSet": ("apis/apps/v1", "statefulsets"),
    "PodDisruptionBudget": ("apis/policy/v1", "poddisruptionbudgets"),
    "NetworkPolicy": ("apis/networking.k8s.io/v1", "networkpolicies"),
    "Lease": ("apis/coordination.k8s.io/v1", "leases"),
    "Broker": ("apis/streamlet.dev/v1alpha1", "brokers"),
    "Stream": ("apis/streamlet.dev/v1alpha1", "streams"),
    "CronJob": ("apis/batch/v1", "cronjobs"),
    "Job": ("apis/batch/v1", "jobs"),
    "ScheduledSparkApplication": ("apis/sparkoperator.k8s.io/v1beta2",
                                  "scheduledsparkapplications"),
    "CustomResourceDefinition": ("apis/apiextensions.k8s.io/v1", "customresourcedefinitions"),
}
#: Kinds without a namespace: their URLs have no namespaces/<ns> part (callers pass "").
CLUSTER_SCOPED = frozenset({"CustomResourceDefinition", "StorageClass", "Node"})
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


def pruned(obj: Any) -> Any:
    """``obj`` without its None fields (a merge patch's "remove"): what a create sends."""
    if isinstance(obj, dict):
        return {k: pruned(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [pruned(v) for v in obj]
    return obj


def is_subset(desired: Any, actual: Any) -> bool:
    """Whether every field set in ``desired`` already has that value in ``actual`` (a None
    field, which a merge patch removes, where ``actual`` has none)."""
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(
            actual.get(k) is None if v is None else k in actual and is_subset(v, actual[k])
            for k, v in desired.items())
    if isinstance(desired, list):
        return (isinstance(actual, list) and len(desired) == len(actual)
                and all(is_subset(d, a) for d, a in zip(desired, actual, strict=True)))
    return bool(desired == actual)


class Kube:
    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        token_path: Path | None = None,
        ca_path: str | None = None,
        insecure: bool = False,
    ) -> None:
        self.server = server.rstrip("/")
        self._token = token
        self._token_path = token_path
        self._ca_path = ca_path
        self._insecure = insecure
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def in_cluster(cls) -> Kube:
        import os

        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        host = f"[{host}]" if ":" in host else host
        # The projected token rotates: read it per request rather than once.
        return cls(f"https://{host}:{port}", token_path=SA_DIR / "token",
                   ca_path=str(SA_DIR / "ca.crt"))

    @classmethod
    def from_connection_info(cls, info: Any) -> Kube:
        """From kopf's ConnectionInfo (as its login functions return it)."""
        return cls(info.server, token=info.token, ca_path=info.ca_path,
                   insecure=bool(info.insecure))

    def _headers(self) -> dict[str, str]:
        token = self._token
        if self._token_path is not None:
            token = self._token_path.read_text().strip()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ssl_ctx: ssl.SSLContext | bool = True
            if self._insecure:
                ssl_ctx = False
            elif self._ca_path:
                ssl_ctx = ssl.create_default_context(cafile=self._ca_path)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ssl_ctx),
                timeout=aiohttp.ClientTimeout(total=30))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _url(self, kind: str, namespace: str, name: str | None = None,
             subresource: str | None = None) -> str:
        prefix, plural = KINDS[kind]
        if kind in CLUSTER_SCOPED:
            url = f"{self.server}/{prefix}/{plural}"
        else:
            url = f"{self.server}/{prefix}/namespaces/{namespace}/{plural}"
        if name:
            url += f"/{name}"
        if subresource:
            url += f"/{subresource}"
        return url

    async def _call(self, method: str, url: str, body: Any = None,
                    content_type: str = "application/json") -> Any:
        headers = self._headers()
        if body is not None:
            headers["Content-Type"] = content_type
        async with self._http().request(method, url, json=body, headers=headers) as resp:
            if resp.status >= 400:
                raise ApiError(resp.status, await resp.text())
            return await resp.json(content_type=None)

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._call("GET", self._url(kind, namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        return result

    async def list(self, kind: str, namespace: str,
                   labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Objects of ``kind``; with ``labels``, only those carrying all of them."""
        url = self._url(kind, namespace)
        if labels:
            url += "?" + urlencode({"labelSelector": ",".join(f"{k}={v}"
                                                              for k, v in labels.items())})
        result = await self._call("GET", url)
        items = list(result.get("items") or [])
        # Filtered here too: a server (or emulator) ignoring the selector changes nothing.
        return [i for i in items if labels is None or is_subset(
            labels, (i.get("metadata") or {}).get("labels") or {})]

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"].get("namespace", "")
        result: dict[str, Any] = await self._call("POST", self._url(obj["kind"], ns), obj)
        return result

    async def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any],
                    subresource: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(
            "PATCH", self._url(kind, namespace, name, subresource), patch,
            content_type="application/merge-patch+json")
        return result

    async def delete(self, kind: str, namespace: str, name: str,
                     propagation: str | None = None) -> bool:
        """Delete an object; ``propagation``: its dependents' fate ("Orphan": they stay)."""
        url = self._url(kind, namespace, name)
        if propagation:
            url += "?" + urlencode({"propagationPolicy": propagation})
        try:
            await self._call("DELETE", url)
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    async def apply(self, obj: dict[str, Any], immutable: tuple[str, ...] = ()) -> dict[str, Any]:
        """Create ``obj``, or merge-patch the fields it sets when they differ from the cluster's.

        ``immutable`` names spec fields left out of the patch: the API server would refuse them.
        """
        meta = obj["metadata"]
        current = await self.get(obj["kind"], meta.get("namespace", ""), meta["name"])
        if current is None:
            return await self.create(pruned(obj))
        desired = dict(obj)
        if immutable and "spec" in desired:
            desired["spec"] = {k: v for k, v in desired["spec"].items() if k not in immutable}
        if is_subset(desired, current):
            return current
        return await self.patch(obj["kind"], meta.get("namespace", ""), meta["name"], desired)
