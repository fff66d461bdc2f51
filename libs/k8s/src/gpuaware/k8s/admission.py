"""Admission webhooks: mutating (defaults, schedulerName opt-in) and validating (refuse with the reason).

Why at admission: a GPU request gpuaware cannot read (a bad ``gpuaware.io/*`` annotation, a fraction of
several GPUs, two MIG instances) or a GPUQueue / GPUPolicy / GPUGang the services would reject should be
refused when it is written, with the reason in ``kubectl``'s answer, not discovered later as a pod that
stays Pending. The checks are the very ones the services run: the pod translation
(``translate.pod_pending``), the quota service's ``QueueSpec``, the placement registry's profile check,
and ``GangSpec``.

- **mutate** (Pod CREATE): a pod asking for a GPU resource whose ``schedulerName`` is empty or
  ``default-scheduler`` is given ``schedulerName: gpuaware`` (the opt-in is by namespace: the
  MutatingWebhookConfiguration's namespaceSelector matches ``gpuaware.io/scheduling: enabled``), and the
  ``gpuaware.io/queue`` annotation defaults to the configured queue. Answered as a JSONPatch.
- **validate** (Pod CREATE; our CRDs CREATE/UPDATE): allowed, or refused with code 400 and the reason.

The review is the ``admission.k8s.io/v1`` AdmissionReview; a review we cannot read raises
``BadReview`` (HTTP 400 in the server).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import msgspec

from gpuaware.k8s.translate import ANNOTATION, SCHEDULER_NAME, TranslationError, gpu_resources, pod_pending

__all__ = ["BadReview", "mutate", "validate"]

_DEFAULT_SCHEDULERS = ("", "default-scheduler")


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer."""


def _request(review: Any) -> Mapping[str, Any]:
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        raise BadReview("expected an admission.k8s.io/v1 AdmissionReview")
    req = review.get("request")
    if not isinstance(req, dict) or not req.get("uid"):
        raise BadReview("AdmissionReview has no request.uid")
    if not req.get("operation") or not isinstance(req.get("kind"), dict):
        raise BadReview("AdmissionReview request has no operation or kind")
    return req


def _answer(req: Mapping[str, Any], allowed: bool, message: str = "", patch: list[dict[str, Any]] | None = None
            ) -> dict[str, Any]:
    resp: dict[str, Any] = {"uid": req["uid"], "allowed": allowed}
    if not allowed:
        resp["status"] = {"code": 400, "reason": "BadRequest", "message": message}
    if patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}


def _object(req: Mapping[str, Any]) -> dict[str, Any]:
    obj = req.get("object")
    if not isinstance(obj, dict):
        raise BadReview("AdmissionReview request has no object")
    return obj


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


_MALFORMED = (AttributeError, TypeError, KeyError, ValueError, IndexError)
"""a field of the wrong JSON type somewhere in the object under review (found by fuzzing)"""


def mutate(review: Any, *, default_queue: str = "default", scheduler_name: str = SCHEDULER_NAME) -> dict[str, Any]:
    req = _request(review)
    try:
        return _mutate(req, default_queue=default_queue, scheduler_name=scheduler_name)
    except BadReview:
        raise
    except _MALFORMED:
        return _answer(req, True)  # nothing to add to an object we cannot read: `validate` refuses it, saying why


def _mutate(req: Mapping[str, Any], *, default_queue: str, scheduler_name: str) -> dict[str, Any]:
    if req.get("kind", {}).get("kind") != "Pod" or req.get("operation") != "CREATE":
        return _answer(req, True)
    pod = _object(req)
    try:
        asks_gpu = bool(gpu_resources(pod))
    except TranslationError:
        return _answer(req, True)  # the validating webhook refuses it with the reason
    spec = pod.get("spec") or {}
    patch: list[dict[str, Any]] = []
    if asks_gpu and spec.get("schedulerName", "") in _DEFAULT_SCHEDULERS and not spec.get("nodeName"):
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": scheduler_name})
    ann = (pod.get("metadata") or {}).get("annotations")
    if asks_gpu and (ann is None or ANNOTATION.QUEUE not in ann):
        if ann is None:
            patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        patch.append({"op": "add", "path": "/metadata/annotations/" + _pointer(ANNOTATION.QUEUE), "value": default_queue})
    return _answer(req, True, patch=patch)


def _crd_check(kind: str, spec: Any) -> str | None:
    """None when `spec` is what the consuming service accepts, else the reason."""
    try:
        if kind == "GPUQueue":
            from gpuaware.quota import QueueSpec

            msgspec.convert(spec, QueueSpec)
        elif kind == "GPUPolicy":
            from gpuaware.placement import REGISTRY

            REGISTRY.resolve(spec)  # every plugin known, every argument typed (what the service checks at start)
        elif kind == "GPUGang":
            from gpuaware.k8s.crds import GangSpec

            msgspec.convert(spec, GangSpec)
        else:
            return None
    except (msgspec.ValidationError, ValueError, TypeError, KeyError) as exc:
        return f"{kind} spec: {exc}"
    return None


def validate(review: Any) -> dict[str, Any]:
    req = _request(review)
    try:
        return _validate(req)
    except BadReview:
        raise
    except _MALFORMED as exc:
        return _answer(req, False, f"the object is malformed ({type(exc).__name__}: {exc})")


def _validate(req: Mapping[str, Any]) -> dict[str, Any]:
    kind = (req.get("kind") or {}).get("kind")
    if req.get("operation") not in ("CREATE", "UPDATE"):
        return _answer(req, True)
    obj = _object(req)
    if kind == "Pod":
        if req.get("operation") != "CREATE":
            return _answer(req, True)
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("uid", req["uid"])  # not assigned yet at admission
        meta.setdefault("name", meta.get("generateName") or "pod")
        try:
            if gpu_resources(obj) or any(k.startswith("gpuaware.io/") for k in (meta.get("annotations") or {})):
                pod_pending({**obj, "metadata": meta}, source="admission")
        except TranslationError as exc:
            if "is not known (yet)" in str(exc):  # DRA claims are resolved later, by the binder
                return _answer(req, True)
            return _answer(req, False, f"gpuaware: {exc}")
        return _answer(req, True)
    reason = _crd_check(kind or "", obj.get("spec"))
    return _answer(req, reason is None, f"gpuaware: {reason}" if reason else "")
