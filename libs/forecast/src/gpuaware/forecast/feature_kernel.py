"""``Features.update`` over a whole block of history at once, compiled (numba).

Training and offline evaluation turn months of minutes into feature rows: calling ``update`` once
per step costs a dozen small numpy calls per step, seconds per series. This kernel runs the same
recurrences, with the same operations in the same order, as one compiled loop, so a block computed
here equals the rows ``update`` yields step by step (tests/forecast holds the two to exact equality);
``update`` stays the one definition the streaming service runs. The machine code is cached beside
the module like placement's kernels (``NUMBA_CACHE_DIR`` moves it; without a writable folder it is
compiled once per process). Calendar columns depend on time alone and are filled by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

__all__ = ["recurrences"]


def _compiled(fn: Callable[..., Any]) -> Any:
    try:
        return njit(cache=True)(fn)
    except RuntimeError:  # nowhere to cache: compile once per process
        return njit(fn)


@_compiled
def recurrences(values: np.ndarray, d_slow: float, d_fast: float, floor: float, root_h: float, clip: float,
                x: np.ndarray, scale: np.ndarray, held: np.ndarray) -> None:  # pragma: no cover - compiled
    """Fill x[:, :, 0:4], scale and held for values (n, T), as ``Features.update`` step by step."""
    n, steps = values.shape
    for i in range(n):
        slow_num = slow_den = fast_num = fast_den = dev_num = dev_den = 0.0
        last = math.nan
        for k in range(steps):
            v = values[i, k]
            seen = math.isfinite(v)
            prev = last
            h = v if seen else prev
            if seen and not math.isfinite(prev):
                prev = v
            hz = h if math.isfinite(h) else 0.0
            if seen:
                slow_num = hz + d_slow * slow_num
                slow_den = 1.0 + d_slow * slow_den
                fast_num = hz + d_fast * fast_num
                fast_den = 1.0 + d_fast * fast_den
            slow = slow_num / slow_den if slow_den > 0 else hz
            fast = fast_num / fast_den if fast_den > 0 else hz
            step = hz - prev if seen and math.isfinite(prev) else 0.0
            if seen:
                dev_num = abs(step) + d_slow * dev_num
                dev_den = 1.0 + d_slow * dev_den
            dev = dev_num / dev_den if dev_den > 0 else 0.0
            s = max(floor, dev * root_h)
            last = h
            x[i, k, 0] = min(max((hz - slow) / s, -clip), clip)
            x[i, k, 1] = min(max((hz - fast) / s, -clip), clip)
            x[i, k, 2] = min(max(step / s, -clip), clip)
            x[i, k, 3] = 1.0 if seen else 0.0
            scale[i, k] = s
            held[i, k] = hz
