"""Helpers: the real payloads in ../shared/k8s (found through GPUAWARE_SHARED_K8S, default ../shared/k8s);
tests that read them skip with a clear message when they are absent."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
K8S = Path(os.environ.get("GPUAWARE_SHARED_K8S", REPO.parent / "shared" / "k8s"))


def shared(rel: str) -> Path:
    p = K8S / rel
    if not p.exists():
        pytest.skip(f"shared Kubernetes payload {p} is absent (set GPUAWARE_SHARED_K8S)")
    return p


def load(rel: str) -> Any:
    return json.loads(shared(rel).read_text())


def pod(**resources: str) -> dict[str, Any]:
    """The recorded pending pod with its container's resources replaced."""
    p = copy.deepcopy(load("extender/object-pod-pending.json"))
    c = p["spec"]["containers"][0]
    c["resources"] = {"limits": {"cpu": "4", "memory": "16Gi", **resources},
                      "requests": {"cpu": "4", "memory": "16Gi", **resources}}
    return p


def node(name: str, *, gpus: int = 8, product: str = "NVIDIA-A100-SXM4-80GB", memory: int = 81920,
         **labels: str) -> dict[str, Any]:
    """The recorded DGX A100 node under another name and GPU count."""
    n = copy.deepcopy(load("extender/object-node-dgx-a100.json"))
    n["metadata"]["name"] = name
    n["metadata"]["uid"] = f"uid-{name}"
    n["metadata"]["labels"].update({"kubernetes.io/hostname": name, "nvidia.com/gpu.count": str(gpus),
                                    "nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(memory),
                                    **labels})
    n["status"]["allocatable"]["nvidia.com/gpu"] = str(gpus)
    n["status"]["capacity"]["nvidia.com/gpu"] = str(gpus)
    return n
