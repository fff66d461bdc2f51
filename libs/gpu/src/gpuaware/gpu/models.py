"""GPU models as the GPU backends see them: the one catalog (``gpuaware.schemas.gpus``), keyed by NVML name.

The records, their memory figures and where each number comes from live in the catalog, which
placement, the twin and this package share; this module only indexes it the way a backend asks:
by the name NVML reports (``MODELS``), or by any name ``model()`` accepts (short names as traces
use them, ``A100-80GB``-style aliases, node-label products such as ``NVIDIA-A100-SXM4-80GB``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from gpuaware.schemas import GPU_CATALOG, GpuModel, find_gpu_model, gpu_model

__all__ = ["MODELS", "GpuModel", "find_model", "mig_compute_slices", "model"]

MODELS: Mapping[str, GpuModel] = MappingProxyType({m.nvml_name: m for m in GPU_CATALOG.values() if m.nvml_name})
"""NVML name (``nvmlDeviceGetName``) -> catalog record, for every disclosed model."""


def model(name: str) -> GpuModel:
    """A catalog record by short name, NVML name or alias; ValueError naming the known models."""
    return gpu_model(name)


def find_model(name: str) -> GpuModel | None:
    """The same, None when unknown (a real node may carry a GPU the catalog has never heard of)."""
    return find_gpu_model(name)


_SLICES = re.compile(r"^(\d+)g\.")


def mig_compute_slices(profile: str) -> int | None:
    """``3g.40gb`` -> 3 (of the 7 compute slices of an A100/H100); None if not a MIG profile name."""
    m = _SLICES.match(profile)
    return int(m.group(1)) if m else None
