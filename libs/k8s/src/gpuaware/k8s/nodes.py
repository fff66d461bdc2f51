"""A Kubernetes Node -> the contract's ``NodeInventory``.

Allocatable CPU and memory; GPUs from HAMi's registration annotation when the node has one (real
UUIDs, models, memory, NUMA), else from the GPU Feature Discovery labels and allocatable
``nvidia.com/gpu`` (time-slicing replicas divided out; GPUs named ``<node>/gpu<i>`` until the
telemetry agent's inventory, which carries NVML's UUIDs, describes the node).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from gpuaware.k8s.translate import (
    GPU,
    HAMI_REGISTER,
    TranslationError,
    malformed_as_translation_error,
    quantity,
)
from gpuaware.schemas import MigMode, NodeInventory

__all__ = ["hami_devices", "node_inventory"]


def _label_int(labels: Mapping[str, str], key: str) -> int | None:
    raw = labels.get(key)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        raise TranslationError(f"node label {key}: {raw!r} is not an integer") from None


def _product_name(product: str) -> str:
    """GFD's sanitised product (``NVIDIA-A100-SXM4-80GB[-SHARED]``) back to NVML's spelling."""
    if product.endswith("-SHARED"):
        product = product[: -len("-SHARED")]
    for prefix in ("NVIDIA-", "Tesla-"):
        if product.startswith(prefix):
            return prefix[:-1] + " " + product[len(prefix):]
    return product


def hami_devices(raw: str) -> list[dict[str, Any]]:
    """HAMi's node registration: the JSON array of today, or the older ``uuid,count,mem,core,type,numa,
    health:`` text."""
    raw = raw.strip()
    if raw.startswith("["):
        try:
            devs = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TranslationError(f"annotation {HAMI_REGISTER}: not JSON ({exc})") from exc
        if not isinstance(devs, list) or not all(isinstance(d, dict) and d.get("id") for d in devs):
            raise TranslationError(f"annotation {HAMI_REGISTER}: expected a list of devices with an id")
        return devs
    out = []
    for i, part in enumerate(p for p in raw.split(":") if p.strip()):
        f = part.split(",")
        if len(f) not in (7, 9):
            raise TranslationError(f"annotation {HAMI_REGISTER}: device {i} has {len(f)} fields, expected 7 or 9")
        try:
            out.append({"id": f[0], "index": i, "count": int(f[1]), "devmem": int(f[2]), "devcore": int(f[3]),
                        "type": f[4], "numa": int(f[5]), "health": f[6].strip().lower() == "true"})
        except ValueError as exc:
            raise TranslationError(f"annotation {HAMI_REGISTER}: device {i}: {exc}") from exc
    return out


def node_inventory(node: Mapping[str, Any], *, source: str, cluster: str = "default",
                   emitted_at: float = 0.0) -> NodeInventory:
    """The node's inventory event (API JSON). Raises ``TranslationError``."""
    with malformed_as_translation_error("node object"):
        return _node_inventory(node, source=source, cluster=cluster, emitted_at=emitted_at)


def _node_inventory(node: Mapping[str, Any], *, source: str, cluster: str, emitted_at: float) -> NodeInventory:
    meta = node.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise TranslationError("metadata.name is missing")
    labels: dict[str, str] = dict(meta.get("labels") or {})
    ann: Mapping[str, str] = meta.get("annotations") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    cpu = int(quantity(alloc.get("cpu", 0), "allocatable cpu") * 1000)
    mem = int(quantity(alloc.get("memory", 0), "allocatable memory") / (1 << 20))
    major, minor = _label_int(labels, "nvidia.com/gpu.compute.major"), _label_int(labels, "nvidia.com/gpu.compute.minor")
    cc = f"{major}.{minor or 0}" if major is not None else "0.0"
    strategy = labels.get("nvidia.com/mig.strategy")
    mig_capable = labels.get("nvidia.com/mig.capable") == "true"
    mig_mode = (MigMode.ENABLED if strategy in ("single", "mixed") else MigMode.DISABLED) if mig_capable \
        else MigMode.UNSUPPORTED
    gpus: list[dict[str, Any]] = []  # converted with the rest below, checked against the contract
    if HAMI_REGISTER in ann:
        for i, d in enumerate(hami_devices(ann[HAMI_REGISTER])):
            if d.get("health") is False:
                continue
            gpus.append(dict(uuid=str(d["id"]), index=int(d.get("index", i)), model=str(d.get("type") or "unknown"),
                             memory_mib=int(d.get("devmem") or 0), pci_bus_id="unknown", compute_capability=cc,
                             numa_node=d.get("numa") if isinstance(d.get("numa"), int) and d["numa"] >= 0 else None,
                             mig_mode=MigMode.ENABLED if d.get("mode") == "mig" else mig_mode))
    else:
        count = int(quantity(alloc.get(GPU, 0), f"allocatable {GPU}"))
        replicas = _label_int(labels, "nvidia.com/gpu.replicas") or 1
        if strategy == "single":  # MIG devices stand in for nvidia.com/gpu: the node's GPUs are not whole
            count = 0
        count //= max(1, replicas)
        product = _product_name(labels.get("nvidia.com/gpu.product", "unknown"))
        memory = _label_int(labels, "nvidia.com/gpu.memory") or 0
        gpus = [dict(uuid=f"{name}/gpu{i}", index=i, model=product, memory_mib=memory, pci_bus_id="unknown",
                     compute_capability=cc, mig_mode=mig_mode) for i in range(count)]
    try:  # convert, not the constructor: it checks every field against the contract
        return msgspec.convert(dict(
            source=source, emitted_at=emitted_at, cluster=cluster, node=name, gpus=tuple(gpus),
            rack=labels.get("topology.gpuaware.io/rack"), zone=labels.get("topology.kubernetes.io/zone"),
            driver_version=labels.get("nvidia.com/cuda.driver-version.full"),
            cuda_version=labels.get("nvidia.com/cuda.runtime-version.full"), cpu_milli=cpu, memory_mib=mem,
            labels=labels), NodeInventory)
    except (msgspec.ValidationError, ValueError) as exc:
        raise TranslationError(f"node {name}: {exc}") from exc
