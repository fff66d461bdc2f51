"""Our custom resources as the services' own inputs: GPUQueues -> the quota tree, GPUPolicy -> a profile.

Why: the CRDs carry exactly the Structs the services decode (``crds.py``), so turning the objects a
cluster holds into the quota service's configuration and placement's profile is a decode plus the
services' own validators, with nothing re-implemented: ``gpuaware.quota.tree.validate`` (cycles,
over-commitment, unknown parents) for the queues, ``REGISTRY.validate`` for a policy. A refused set of
objects names each object and the reason, so whoever writes them (an operator, a GitOps tool) sees
which one is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

__all__ = ["CustomResourceError", "policy_profile", "quota_config"]


class CustomResourceError(ValueError):
    """Objects that do not make a valid configuration; the message names them."""


def quota_config(queues: Iterable[Mapping[str, Any]], *, default_queue: str | None = None,
                 half_life_s: float | None = None) -> Any:
    """The quota service's ``QuotaConfig`` from GPUQueue objects (API JSON), validated as a tree.
    Each object's ``spec.name`` must be its ``metadata.name`` (one queue per object)."""
    from gpuaware.quota import QueueSpec, QuotaConfig, QuotaConfigError, validate

    specs = []
    problems = []
    for obj in queues:
        name = _name(obj)
        if not isinstance(obj, Mapping):
            problems.append(f"GPUQueue {name}: not an object")
            continue
        try:
            spec = msgspec.convert(obj.get("spec"), QueueSpec)
        except msgspec.ValidationError as exc:
            problems.append(f"GPUQueue {name}: {exc}")
            continue
        if spec.name != name:
            problems.append(f"GPUQueue {name}: spec.name {spec.name!r} differs from metadata.name")
            continue
        specs.append(spec)
    if problems:
        raise CustomResourceError("; ".join(problems))
    kw: dict[str, Any] = {"queues": tuple(sorted(specs, key=lambda q: q.name)), "default_queue": default_queue}
    if half_life_s is not None:
        kw["half_life_s"] = half_life_s
    config = QuotaConfig(**kw)
    try:
        validate(config)
    except QuotaConfigError as exc:
        raise CustomResourceError(f"GPUQueues: {exc}") from None
    return config


def _name(obj: Any) -> Any:
    """``metadata.name`` of an object of any shape (None when it has none), for messages."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta.get("name") if isinstance(meta, Mapping) else None


def policy_profile(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A GPUPolicy's spec as a placement profile (checked by the registry: every plugin known, every
    argument typed), ready for ``GPUAWARE_PLACEMENT_PROFILE``."""
    from gpuaware.placement import REGISTRY

    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, dict):
        raise CustomResourceError(f"GPUPolicy {_name(obj)}: no spec")
    try:
        REGISTRY.validate(spec)
    except ValueError as exc:
        raise CustomResourceError(f"GPUPolicy {_name(obj)}: {exc}") from None
    return dict(spec)
