"""How the figures the platform reports are computed, so a p99 means the same wherever it is read.

A percentile is read with linear interpolation between the order statistics (numpy's default
``np.percentile``, and ``statistics.quantiles(..., method="inclusive")``): the q-th percentile of n
sorted values stands at position ``(n - 1) * q / 100``. The demos, the simulators and the benches all
report their latencies and delays through ``percentile``. It is plain Python so that any layer may
use it: the schemas import no library.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["percentile"]


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100) of ``values``, interpolated linearly; NaN for no values."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))
