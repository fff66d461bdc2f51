"""The few API calls we make, through the official client, each answering in our vocabulary.

Thin on purpose (the rules live in ``objects`` and ``watch``): Binding and Eviction are sent with
``_preload_content=False`` because the apiserver answers both with a ``metav1.Status`` the client's
models cannot read (the Binding quirk, kubernetes-client/python #547 / #825: deserialising fails
*after* the bind succeeded, and a retry would then get 409). Errors the client raises as
``ApiException`` are read by the same rules as a success.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuaware.k8s.objects import BindOutcome, bind_outcome, binding, eviction

__all__ = ["EvictOutcome", "bind", "core_api", "evict", "post_event"]


def core_api(kubeconfig: str | None = None, host: str | None = None) -> client.CoreV1Api:
    """In-cluster config when running in a pod, else ``kubeconfig`` (or ``host`` for tests)."""
    from kubernetes import config

    if host is not None:
        cfg = client.Configuration(host=host)
        return client.CoreV1Api(client.ApiClient(cfg))
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig)
    return client.CoreV1Api()


def bind(api: client.CoreV1Api, namespace: str, name: str, uid: str, node: str,
         annotations: Mapping[str, str] | None = None) -> BindOutcome:
    """Create the pod's Binding to `node` (see ``objects.bind_outcome`` for how answers read)."""
    body = binding(namespace, name, uid, node, annotations)
    try:
        resp = api.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
    except ApiException as exc:
        return bind_outcome(int(exc.status or 0), exc.body, node)
    return bind_outcome(resp.status, resp.data, node)


class EvictOutcome:
    EVICTED = "evicted"
    GONE = "gone"
    """the pod no longer exists (or is another pod now): nothing to evict"""
    BLOCKED = "blocked"
    """a PodDisruptionBudget does not allow it now (HTTP 429): try again later"""
    FAILED = "failed"


def evict(api: client.CoreV1Api, namespace: str, name: str, uid: str,
          grace_period_s: int | None = None) -> tuple[str, str]:
    """Evict through the Eviction API (PDBs respected by the apiserver). Returns (outcome, message)."""
    body = eviction(namespace, name, uid, grace_period_s)
    try:
        resp = api.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False)
        status, data = resp.status, resp.data
    except ApiException as exc:
        status, data = int(exc.status or 0), exc.body
    try:
        msg = str(json.loads(data or b"{}").get("message", ""))
    except (json.JSONDecodeError, AttributeError):
        msg = str(data)
    if status in (200, 201):
        return EvictOutcome.EVICTED, msg
    if status == 404 or (status == 409 and "precondition" in msg.lower()):
        return EvictOutcome.GONE, msg
    if status == 429:
        return EvictOutcome.BLOCKED, msg or "disruption budget"
    return EvictOutcome.FAILED, msg or f"HTTP {status}"


def post_event(api: client.CoreV1Api, body: Any) -> None:
    api.create_namespaced_event(body.metadata.namespace, body)
