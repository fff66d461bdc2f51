"""Numbers as the demo's report shows them to people, and its JSON free of database number types.

One helper (``human``) formats every number the report prints - the HTML tables, the console tables,
the dashboards' stat and table panels - so a figure reads the same wherever it appears:

* integers (and floats that are whole numbers) with thousands separators: ``82``, ``12,345``;
* other numbers to four significant digits, never in exponent form: ``0.07712``, ``13.6``, ``1,234``;
  what rounds to zero is ``0``, not ``0E-20`` or ``0.000``;
* PostgreSQL's ``numeric`` (``Decimal``) as the number it is, not its ``str`` (``13.600000000000000``);
* ``None`` and NaN as ``n/a``.

``plain`` turns what a database row or an analysis holds into JSON-ready values (``Decimal`` -> int or
float, NaN / infinity -> ``None``), so ``report.json`` stays strict JSON with numbers, not strings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["NO_DATA", "human", "plain"]

NO_DATA = "no data"
"""what a chart or a figure shows when its series is empty or too short to draw"""

SIGNIFICANT = 4
"""significant digits of a number that is not whole"""


def human(v: Any, *, digits: int = SIGNIFICANT) -> str:
    """``v`` for people (module docstring); anything that is not a number is ``str(v)``."""
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, Decimal):
        if not v.is_finite():
            return "n/a"
        v = int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "n/a"
        if v == 0 or abs(v) < 0.5 * 10 ** -(digits + 2):
            return "0"
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        magnitude = math.floor(math.log10(abs(v)))
        decimals = max(0, digits - 1 - magnitude)
        text = f"{v:,.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text
    return str(v)


def plain(v: Any) -> Any:
    """``v`` with every ``Decimal`` a number and every non-finite float ``None``, in nested mappings,
    lists and tuples (tuples become lists, as JSON has them)."""
    if isinstance(v, Decimal):
        if not v.is_finite():
            return None
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Mapping):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    return v
