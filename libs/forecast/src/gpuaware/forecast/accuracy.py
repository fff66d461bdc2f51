"""How far a forecast is from what happened: RMSE and sMAPE over the targets that were observed.

Only pairs where both the actual and the forecast are finite count (a filled gap is not a correct
forecast). sMAPE is in percent, ``200 |a - f| / (|a| + |f|)`` with 0/0 counted as 0 (a VC idle and
forecast idle is a perfect forecast, not an undefined one), the Helios/CES definition. Plain numpy,
so a report outside this package (the demo's accuracy table) uses the same definitions.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["rmse", "smape"]


def _observed(actual: ArrayLike, forecast: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    a, f = np.asarray(actual, dtype=np.float64), np.asarray(forecast, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(f)
    return a[ok], f[ok]


def rmse(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Root mean squared error over the observed pairs; NaN when there are none."""
    a, f = _observed(actual, forecast)
    return float(np.sqrt(np.mean((a - f) ** 2))) if a.size else float("nan")


def smape(actual: ArrayLike, forecast: ArrayLike) -> float:
    """Mean sMAPE over the observed pairs, in percent; NaN when there are none."""
    a, f = _observed(actual, forecast)
    den = np.abs(a) + np.abs(f)
    terms = np.divide(200.0 * np.abs(a - f), den, out=np.zeros_like(den), where=den > 0)
    return float(terms.mean()) if terms.size else float("nan")
