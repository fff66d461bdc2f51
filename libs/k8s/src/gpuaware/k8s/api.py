"""The few API calls we make, through the official client, each answering in our vocabulary.

Thin on purpose (the rules live in ``objects`` and ``watch``): Binding and Eviction are sent with
``_preload_content=False`` because the apiserver answers both with a ``metav1.Status`` the client's
models cannot read (the Binding quirk, kubernetes-client/python #547 / #825: deserialising fails
*after* the bind succeeded, and a retry would then get 409). Errors the client raises as
``ApiException`` are read by the same rules as a success.

Every function declares the RBAC rules it needs (``@needs``; ``RULES`` maps function name -> rules):
the chart's Role for a service must grant exactly the union over the functions the service calls,
which tests/helm checks by reading the services' code.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from gpuaware.k8s.objects import (
    BindOutcome,
    bind_outcome,
    binding,
    eviction,
    power_down_patch,
    power_up_patch,
)

__all__ = [
    "RULES",
    "EvictOutcome",
    "Rule",
    "bind",
    "core_api",
    "custom_api",
    "evict",
    "lease_get",
    "lease_write",
    "needs",
    "node_source",
    "patch_node_power",
    "patch_pod_annotations",
    "patch_policy_status",
    "patch_queue_status",
    "pod_source",
    "policy_source",
    "post_event",
    "queue_source",
    "read_claim",
]

Rule = tuple[str, str, str]
"""(API group, resource[/subresource], verb)"""
RULES: dict[str, tuple[Rule, ...]] = {}
F = TypeVar("F", bound=Callable[..., Any])


def needs(*rules: Rule) -> Callable[[F], F]:
    def mark(fn: F) -> F:
        RULES[fn.__name__] = rules
        return fn

    return mark


def _load_config(kubeconfig: str | None) -> None:
    """In-cluster credentials in a pod, else ``kubeconfig``, else ``KUBECONFIG`` as it is now (the
    client reads that variable once, when it is first imported)."""
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG") or None)


def core_api(kubeconfig: str | None = None, host: str | None = None) -> client.CoreV1Api:
    """In-cluster config when running in a pod, else ``kubeconfig`` (or ``host`` for tests)."""
    if host is not None:
        cfg = client.Configuration(host=host)
        return client.CoreV1Api(client.ApiClient(cfg))
    _load_config(kubeconfig)
    return client.CoreV1Api()


def custom_api(kubeconfig: str | None = None) -> client.CustomObjectsApi:
    """Our custom resources' API: in-cluster config in a pod, else ``kubeconfig`` (default: ``KUBECONFIG``)."""
    _load_config(kubeconfig)
    return client.CustomObjectsApi()


@needs(("", "pods/binding", "create"))
def bind(api: client.CoreV1Api, namespace: str, name: str, uid: str, node: str,
         annotations: Mapping[str, str] | None = None) -> BindOutcome:
    """Create the pod's Binding to `node` (see ``objects.bind_outcome`` for how answers read)."""
    body = binding(namespace, name, uid, node, annotations)
    try:
        # _preload_content=False: the raw urllib3 response, not the model the client's types promise
        resp: Any = api.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
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


@needs(("", "pods/eviction", "create"))
def evict(api: client.CoreV1Api, namespace: str, name: str, uid: str,
          grace_period_s: int | None = None) -> tuple[str, str]:
    """Evict through the Eviction API (PDBs respected by the apiserver). Returns (outcome, message)."""
    body = eviction(namespace, name, uid, grace_period_s)
    try:
        resp: Any = api.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False)
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


@needs(("", "events", "create"))
def post_event(api: client.CoreV1Api, body: Any) -> None:
    api.create_namespaced_event(body.metadata.namespace, body)


@needs(("", "nodes", "patch"))
def patch_node_power(api: client.CoreV1Api, node: str, *, off: bool, at: str) -> tuple[bool, str]:
    """Cordon and mark ``node`` for switching off (``off``), or uncordon a node gpuaware cordoned so.
    Returns (changed, message): a power-up of a node gpuaware did not cordon changes nothing (HTTP 422
    on the patch's test), a node that is gone changes nothing (404)."""
    try:
        api.patch_node(node, power_down_patch(at) if off else power_up_patch(at))
    except ApiException as exc:
        status = int(exc.status or 0)
        if status in (404, 422):
            return False, "no such node" if status == 404 else "not cordoned by gpuaware: left as it is"
        raise
    return True, ""


@needs(("", "pods", "patch"))
def patch_pod_annotations(api: client.CoreV1Api, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
    """Merge-patch the pod's annotations (None removes one): the checkpoint handshake."""
    api.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": dict(annotations)}})


def _source(list_call: Callable[..., Any], **selectors: Any) -> tuple[
        Callable[[], tuple[list[dict[str, Any]], str]], Callable[[str], Iterator[dict[str, Any]]]]:
    """(list_fn, watch_fn) for ``watch.run_watch``, reading raw JSON (no model round trip)."""

    def list_fn() -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        cont = None
        while True:
            resp = list_call(limit=500, _continue=cont, _preload_content=False, **selectors)
            data = json.loads(resp.data)
            items += data.get("items") or []
            cont = (data.get("metadata") or {}).get("continue")
            if not cont:
                return items, data["metadata"]["resourceVersion"]

    def watch_fn(rv: str) -> Iterator[dict[str, Any]]:
        resp = list_call(watch=True, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=300,
                         _preload_content=False, **selectors)
        try:
            for line in iter_resp_lines(resp):
                if line:
                    yield json.loads(line)
        finally:
            resp.release_conn()

    return list_fn, watch_fn


@needs(("", "pods", "list"), ("", "pods", "watch"))
def pod_source(api: client.CoreV1Api, scheduler_name: str) -> tuple[Any, Any]:
    """Pods of our scheduler, in every namespace."""
    return _source(api.list_pod_for_all_namespaces, field_selector=f"spec.schedulerName={scheduler_name}")


@needs(("", "nodes", "list"), ("", "nodes", "watch"))
def node_source(api: client.CoreV1Api) -> tuple[Any, Any]:
    return _source(api.list_node)


def _cluster_objects(api: client.CustomObjectsApi, plural: str) -> tuple[Any, Any]:
    from gpuaware.k8s.crds import GROUP, VERSION

    return _source(functools.partial(api.list_cluster_custom_object, GROUP, VERSION, plural))


@needs(("gpuaware.io", "gpuqueues", "list"), ("gpuaware.io", "gpuqueues", "watch"))
def queue_source(api: client.CustomObjectsApi) -> tuple[Any, Any]:
    """Every GPUQueue (cluster-scoped)."""
    return _cluster_objects(api, "gpuqueues")


@needs(("gpuaware.io", "gpupolicies", "list"), ("gpuaware.io", "gpupolicies", "watch"))
def policy_source(api: client.CustomObjectsApi) -> tuple[Any, Any]:
    """Every GPUPolicy (cluster-scoped)."""
    return _cluster_objects(api, "gpupolicies")


def _patch_status(api: client.CustomObjectsApi, plural: str, name: str, patch: Mapping[str, Any]) -> None:
    from gpuaware.k8s.crds import GROUP, VERSION

    # a merge patch (the client's default for this call): only the fields given change
    api.patch_cluster_custom_object_status(GROUP, VERSION, plural, name, dict(patch), _preload_content=False)


@needs(("gpuaware.io", "gpuqueues/status", "patch"))
def patch_queue_status(api: client.CustomObjectsApi, name: str, patch: Mapping[str, Any]) -> None:
    _patch_status(api, "gpuqueues", name, patch)


@needs(("gpuaware.io", "gpupolicies/status", "patch"))
def patch_policy_status(api: client.CustomObjectsApi, name: str, patch: Mapping[str, Any]) -> None:
    _patch_status(api, "gpupolicies", name, patch)


@needs(("resource.k8s.io", "resourceclaims", "get"), ("resource.k8s.io", "resourceclaimtemplates", "get"))
def read_claim(namespace: str, name: str, *, template: bool, core: Any = None) -> dict[str, Any] | None:
    """A DRA ResourceClaim (or template) as JSON, None when absent (`core`: a CoreV1Api whose
    connection to reuse)."""
    api = client.ResourceV1Api(core.api_client if core is not None else None)
    # called with _preload_content=False: the raw response (its .data), not the typed model
    call: Callable[..., Any] = (api.read_namespaced_resource_claim_template if template
                                else api.read_namespaced_resource_claim)
    try:
        return json.loads(call(name, namespace, _preload_content=False).data)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


@needs(("gpuaware.io", "gpugangs", "get"))
def read_gang(namespace: str, name: str, *, core: Any = None) -> dict[str, Any] | None:
    """A GPUGang's spec (its ``minMember``, ``maxMember``, queue, topology), None when absent."""
    from gpuaware.k8s.crds import GROUP, VERSION

    api = client.CustomObjectsApi(core.api_client if core is not None else None)
    try:
        obj: Any = api.get_namespaced_custom_object(GROUP, VERSION, namespace, "gpugangs", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return dict(obj.get("spec") or {})


@needs(("coordination.k8s.io", "leases", "get"))
def lease_get(namespace: str, name: str, api: Any = None) -> dict[str, Any] | None:
    api = api or client.CoordinationV1Api()
    try:
        return json.loads(api.read_namespaced_lease(name, namespace, _preload_content=False).data)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


@needs(("coordination.k8s.io", "leases", "create"), ("coordination.k8s.io", "leases", "update"))
def lease_write(step: Any, api: Any = None) -> bool:
    """Carry out a ``leader.decide`` step; False when another candidate won the race (409)."""
    api = api or client.CoordinationV1Api()
    body = step.body
    try:
        if step.action == "create":
            api.create_namespaced_lease(body.metadata.namespace, body)
        elif step.action in ("renew", "take"):
            api.replace_namespaced_lease(body.metadata.name, body.metadata.namespace, body)
        return step.action != "wait"
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise
