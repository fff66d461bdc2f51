"""The policies gpuaware ships, as profiles: the six published ones, ours and its variants, the default.

Profiles are plain mappings in the registry's profile shape (args.py); the registry (builtin.py)
validates every one of them when it is built.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from gpuaware.placement.stock import KUBE_DEFAULT, KUBE_DEFAULT_CONFIG

__all__ = ["BUILTIN_POLICIES", "DEFAULT_PROFILE", "OURS", "PUBLISHED", "SIGNAL_WEIGHTS", "VARIANTS"]

_PUBLISHED: dict[str, dict[str, Any]] = {
    "Random": {"score": [{"name": "random", "weight": 1000}], "gpu": "random"},
    "DotProd": {"score": [{"name": "dotprod", "weight": 1000}], "gpu": "best"},
    "GpuClustering": {"score": [{"name": "gpuclustering", "weight": 1000}], "gpu": "best"},
    "GpuPacking": {"score": [{"name": "gpupacking", "weight": 1000}], "gpu": "best"},
    "BestFit": {"score": [{"name": "bestfit", "weight": 1000}], "gpu": "best"},
    "FGD": {"score": [{"name": "fgd", "weight": 1000}], "gpu": "fgd"},
}
"""The six published policies, in the paper's order."""

PUBLISHED = tuple(_PUBLISHED)

OURS = "WasteGradient"
"""Our policy: FGD's gradient on expected *waste* = fragmentation + GPU stranded by CPU + unfillable gaps."""


def _waste(strand: float, gap: float, kappa: float = 30.0) -> dict[str, Any]:
    return {"score": [{"name": "waste-gradient", "weight": 1000,
                       "args": {"strand": strand, "gap": gap, "kappa": kappa}}], "gpu": "waste-gradient"}


_OURS_AND_VARIANTS: dict[str, dict[str, Any]] = {
    OURS: _waste(2.0, 4.0, 30.0),
    # variants of its terms, kept so the comparison stays honest (bench/results/placement.json)
    "WasteGradient-StrandOnly": _waste(2.0, 0.0),
    "WasteGradient-GapOnly": _waste(0.0, 4.0, 30.0),
    "WasteGradient-RandomFill": _waste(2.0, 4.0, 1e6),  # gaps valued with unlimited small pods (no scarcity)
    "FGD-Float": {"score": [{"name": "fgd-float", "weight": 1}], "gpu": "fgd-float"},
}
VARIANTS = tuple(p for p in _OURS_AND_VARIANTS if p != OURS)

DEFAULT_PROFILE = "GpuAware"
"""The default profile: OURS (WasteGradient, unchanged) plus the signal scores as tie-breakers.

Weights. WasteGradient scores int(100 sigmoid(waste saved / 1000)) at weight 1000, so one point of it
(about 40 milli-GPU of expected waste near the middle of the scale) is worth 1000. A signal score s at
weight w moves a node by w * (difference in s); it outvotes k packing points only when that exceeds
1000 k. The weights are chosen so that a signal breaks every packing tie, outvotes one packing point
(up to three for a GPU at 0) only when the GPU is clearly bad, and never one for small differences:

  signal             w    outvotes 1 packing point when       e.g.
  health            32    health differs by >= 32 points      DEGRADED (<= 40) vs healthy 100: 1920
  thermal-power     18    thermal/power differs by >= 56      90 degC vs cool: 1800; 75 degC (60): 720
  forecast-headroom 12    overshoot differs by >= 0.84 GPU    a tie-breaker but for a GPU forecast full
  topology          11    NVLink island (100) vs neither (0)  one NUMA node (60) vs neither: 660

No single signal's weighted difference (at most 100 points) is a multiple of 1000, so a signal never
exactly ties a number of packing points (ties would fall to the node rank, not to the signal).
Unknown signals score 100 on every node (a constant), so without telemetry and topology the decisions
are exactly WasteGradient's. The GPU choice is WasteGradient's too unless the picked GPU is more than
25 quality points worse than the best fitting GPU of the node (signal-aware, tolerance 25).

  {"score": [{"name": "waste-gradient", "weight": 1000, "args": {"strand": 2.0, "gap": 4.0, "kappa": 30.0}},
             {"name": "health", "weight": 32}, {"name": "thermal-power", "weight": 18},
             {"name": "forecast-headroom", "weight": 12}, {"name": "topology", "weight": 11}],
   "gpu": "signal-aware", "gpu_args": {"inner": "waste-gradient", "tolerance": 25}}
"""

SIGNAL_WEIGHTS: Mapping[str, int] = types.MappingProxyType(
    {"health": 32, "thermal-power": 18, "forecast-headroom": 12, "topology": 11})

_DEFAULT: dict[str, Any] = {
    "score": [*_OURS_AND_VARIANTS[OURS]["score"], *({"name": k, "weight": w} for k, w in SIGNAL_WEIGHTS.items())],
    "gpu": "signal-aware",
    "gpu_args": {"inner": _OURS_AND_VARIANTS[OURS]["gpu"], "tolerance": 25},
}

BUILTIN_POLICIES: Mapping[str, Mapping[str, Any]] = types.MappingProxyType(
    {**_PUBLISHED, **_OURS_AND_VARIANTS, DEFAULT_PROFILE: _DEFAULT, KUBE_DEFAULT: KUBE_DEFAULT_CONFIG})
"""Every policy gpuaware ships, in registration order."""
