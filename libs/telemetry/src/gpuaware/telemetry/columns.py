"""From decoded ``GpuSampled`` batches to the columns of ``gpu_samples``, without a row in between.

The wire format is columnar and so is the writer (``gpuaware.tsdb.SampleColumns``): this module
concatenates each metric over many batches and turns it into one numpy array, so the cost is a few
list operations per batch and per metric, not per value. ``None`` (a GPU that does not report a
metric) and absent columns (an agent that does not collect it) become NaN in float columns and -1
in integer and boolean ones, which the writer stores as NULL.

Contract metric -> table column: the same name, except the uncorrectable ECC counts, which fill
the older ``ecc_volatile`` / ``ecc_aggregate`` columns, and ``retired_rows``, which holds the rows
taken out of service whichever way the GPU reports them (uncorrectable remapped rows on Ampere and
later, retired pages before); ``retired_pages`` is also stored as reported. See tsdb migration 0006.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from typing import Any, NamedTuple

import numpy as np

from gpuaware.gpu import COLUMNS
from gpuaware.schemas import METRIC_COLUMNS, GpuSampled

__all__ = ["DB_COLUMN_OF", "TABLE_METRIC_COLUMNS", "ColumnBatch", "to_columns"]

DB_COLUMN_OF: Mapping[str, str] = {
    **{name: name for name in METRIC_COLUMNS},
    "ecc_uncorrected_volatile": "ecc_volatile",
    "ecc_uncorrected_aggregate": "ecc_aggregate",
    "remapped_rows_uncorrectable": "retired_rows",
    "anomaly_flags": "anomaly_flags",
}
#: the metric columns of gpu_samples this module fills (everything but ts, node, gpu_uuid)
TABLE_METRIC_COLUMNS: tuple[str, ...] = tuple(DB_COLUMN_OF.values())


class ColumnBatch(NamedTuple):
    """Rows of ``gpu_samples``, column by column (``SampleColumns(*batch)`` in the collector)."""

    ts: np.ndarray
    node: list[str]
    gpu_uuid: list[str]
    metrics: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.ts)


_METRICS: tuple[str, ...] = (*METRIC_COLUMNS, "anomaly_flags")
_KINDS: tuple[str, ...] = tuple(COLUMNS[name].kind if name in COLUMNS else "i" for name in _METRICS)
_METRICS_OF = operator.attrgetter(*_METRICS)


def _array(kind: str, values: list[Any]) -> np.ndarray:
    if kind == "f":
        return np.array(values, dtype=np.float64)  # None becomes NaN
    try:
        return np.array(values, dtype=np.int64)
    except TypeError:  # a None: not a number
        return np.array([-1 if v is None else v for v in values], dtype=np.int64)


def to_columns(batches: Sequence[GpuSampled]) -> ColumnBatch:
    """Concatenate ``batches`` into table columns (rows in batch order, GPUs in batch order).

    The per-batch work is one attribute fetch of all metrics at once; each metric is then joined
    over the batches and converted by numpy, in C."""
    sizes = [len(b.gpu_uuid) for b in batches]
    ts = np.repeat(np.array([b.sampled_at for b in batches], dtype=np.float64), sizes)
    node = list(chain.from_iterable(map(repeat, (b.node for b in batches), sizes)))
    uuids = list(chain.from_iterable(b.gpu_uuid for b in batches))
    metrics: dict[str, np.ndarray] = {}
    for name, kind, columns in zip(_METRICS, _KINDS, zip(*map(_METRICS_OF, batches), strict=True), strict=False):
        if all(columns):
            values = list(chain.from_iterable(columns))
        elif any(columns):  # some agents do not collect it: None (NULL) for their GPUs
            values = list(chain.from_iterable(c or repeat(None, n) for c, n in zip(columns, sizes, strict=True)))
        else:
            continue
        metrics[DB_COLUMN_OF[name]] = _array(kind, values)
    remapped = metrics.get("retired_rows")
    pages = metrics.get("retired_pages")
    if pages is not None:
        metrics["retired_rows"] = pages if remapped is None else np.where(remapped >= 0, remapped, pages)
    return ColumnBatch(ts, node, uuids, metrics)
