"""Columnar sample batches and their PostgreSQL binary COPY encoding, built with numpy.

Why: the collector's hot path is "many GPU rows in, one COPY out". Feeding COPY row by row through
`copy.write_row` costs a Python call and a type dispatch per value (~25 values a row); at 40,000 rows
a second that is a core. Telemetry arrives columnar anyway (`GpuSampled` has one tuple per metric),
so a batch stays columnar here and the whole `COPY ... (FORMAT BINARY)` payload is assembled with a
handful of numpy operations per column, then written in one call.

The binary format (PostgreSQL docs, "COPY - Binary Format"): an 11-byte signature, two int32 (flags,
header extension length), then per row an int16 field count and per field an int32 byte length
(-1 = NULL) followed by the value in network byte order; an int16 -1 ends the stream. Timestamps
are int64 microseconds since 2000-01-01 UTC.

Two assembly paths, same bytes: when every row has the same layout (no column mixes NULLs and
values, every text column has one length), rows are records of one numpy structured dtype and the
payload is a single array's bytes; otherwise fields are scattered into place by computed offsets.

Missing values follow `gpuaware.gpu.GpuFrame`: NaN in float columns, any negative value in integer
and boolean columns (every integer metric of the contract is non-negative) is NULL.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, cast

import numpy as np

from gpuaware.tsdb.rows import SAMPLE_COLUMNS, SAMPLE_PG_TYPES

__all__ = ["SampleColumns", "encode_copy_binary", "encode_sample_columns", "timestamp_micros"]

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = b"\xff\xff"
_PG_EPOCH_S = 946_684_800  # 2000-01-01T00:00:00Z in Unix seconds


def timestamp_micros(unix_s: Any) -> np.ndarray:
    """Unix seconds -> what PostgreSQL stores for a timestamptz: integer microseconds since 2000-01-01
    (rounded to the nearest, as every COPY of ours does). Compare stored times with this, not floats."""
    return np.rint((np.asarray(unix_s, dtype=np.float64) - _PG_EPOCH_S) * 1e6).astype(np.int64)
_FIXED: dict[str, tuple[str, int]] = {
    "float4": (">f4", 4), "float8": (">f8", 8), "int2": (">i2", 2), "int4": (">i4", 4),
    "int8": (">i8", 8), "bool": ("u1", 1), "timestamptz": (">i8", 8),
}
_NULL = np.frombuffer(struct.pack(">i", -1), dtype=np.uint8)


@dataclass(frozen=True, eq=False)
class SampleColumns:
    """A batch of `gpu_samples` rows, column by column.

    `ts` is Unix seconds (float64), `node` and `gpu_uuid` one string per row, `metrics` maps any
    of the other `SAMPLE_COLUMNS` to an array of one value per row (absent columns are NULL).
    """

    ts: np.ndarray
    node: Sequence[str]
    gpu_uuid: Sequence[str]
    metrics: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.ts)
        if len(self.node) != n or len(self.gpu_uuid) != n:
            raise ValueError(f"ts has {n} rows, node {len(self.node)}, gpu_uuid {len(self.gpu_uuid)}")
        unknown = set(self.metrics) - set(SAMPLE_COLUMNS[3:])
        if unknown:
            raise ValueError(f"not gpu_samples columns: {sorted(unknown)}")
        for name, col in self.metrics.items():
            if len(col) != n:
                raise ValueError(f"column {name} has {len(col)} rows, expected {n}")
        if n and not np.isfinite(self.ts).all():
            raise ValueError("ts holds a non-finite timestamp")

    def __len__(self) -> int:
        return len(self.ts)

    def days(self) -> list[date]:
        """The UTC days the rows fall on (their partitions), sorted."""
        if not len(self.ts):
            return []
        return [datetime.fromtimestamp(int(d) * 86400, UTC).date()
                for d in np.unique(np.floor_divide(self.ts, 86400).astype(np.int64))]

    @classmethod
    def concat(cls, parts: Sequence[SampleColumns]) -> SampleColumns:
        if len(parts) == 1:
            return parts[0]
        names = {name for p in parts for name in p.metrics}
        metrics = {}
        for name in names:
            kind = _pg_type(name)
            metrics[name] = np.concatenate([p.metrics[name] if name in p.metrics else _null_column(kind, len(p))
                                            for p in parts])
        return cls(ts=np.concatenate([p.ts for p in parts]),
                   node=[x for p in parts for x in p.node],
                   gpu_uuid=[x for p in parts for x in p.gpu_uuid], metrics=metrics)


_TYPE_OF = dict(zip(SAMPLE_COLUMNS, SAMPLE_PG_TYPES, strict=True))


def _pg_type(name: str) -> str:
    return _TYPE_OF[name]


def _null_column(pg_type: str, n: int) -> np.ndarray:
    return np.full(n, np.nan) if pg_type.startswith("float") else np.full(n, -1, dtype=np.int64)


class _Text:
    """A text column as one UTF-8 blob and per-row byte lengths."""

    def __init__(self, values: Sequence[str]) -> None:
        joined = "".join(values)
        if joined.isascii():
            self.blob = joined.encode()
            self.lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        else:
            encoded = [v.encode() for v in values]
            self.blob = b"".join(encoded)
            self.lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(values))


_Field = tuple[str, "_Text | np.ndarray", "np.ndarray | None"]
"""(PostgreSQL type, the column's data, its NULL mask or None)"""


def _fixed(pg_type: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(big-endian values, NULL mask or None when there is no NULL)."""
    dtype, _ = _FIXED[pg_type]
    arr = np.asarray(values)
    if pg_type.startswith("float"):
        null = np.isnan(arr.astype(np.float64, copy=False))
        out = np.where(null, 0.0, arr).astype(dtype)
    else:
        null = arr < 0
        out = np.where(null, 0, arr).astype(dtype)
    return out, (null if null.any() else None)


def encode_copy_binary(columns: Sequence[tuple[str, object]], n: int) -> bytes:
    """The COPY binary payload of `n` rows; `columns` are (PostgreSQL type, values) in table order.

    Values: a numpy array for fixed-width types (NaN / negative = NULL, see the module docstring;
    timestamptz given as Unix seconds), a sequence of str for `text`.
    """
    fields: list[_Field] = []
    uniform = True
    for pg_type, values in columns:
        if pg_type == "text":
            text = _Text(cast(Sequence[str], values))
            if n and (text.lengths != text.lengths[0]).any():
                uniform = False
            fields.append(("text", text, None))
        elif pg_type == "timestamptz":
            fields.append((pg_type, timestamp_micros(values).astype(">i8"), None))
        else:
            data, null = _fixed(pg_type, np.asarray(values))
            if null is not None and not null.all():
                uniform = False
            fields.append((pg_type, data, null))
    if n == 0:
        return SIGNATURE + TRAILER
    body = _uniform(fields, n) if uniform else _scattered(fields, n)
    return SIGNATURE + body + TRAILER


def _uniform(fields: list[_Field], n: int) -> bytes:
    """Every row has the same layout: one structured record per row."""
    spec: list[tuple[str, str]] = [("count", ">i2")]
    assign: list[tuple[str, object]] = []
    for k, (kind, data, null) in enumerate(fields):
        spec.append((f"l{k}", ">i4"))
        if isinstance(data, _Text):
            width = int(data.lengths[0])
            assign.append((f"l{k}", width))
            if width:
                spec.append((f"v{k}", f"V{width}"))
                assign.append((f"v{k}", np.frombuffer(data.blob, dtype=f"V{width}")))
        elif null is not None:  # the whole column is NULL
            assign.append((f"l{k}", -1))
        else:
            width = _FIXED[kind][1]
            spec.append((f"v{k}", data.dtype.str))
            assign.append((f"l{k}", width))
            assign.append((f"v{k}", data))
    rec = np.empty(n, dtype=np.dtype(spec))
    rec["count"] = len(fields)
    for name, value in assign:
        rec[name] = value
    return rec.tobytes()


def _scattered(fields: list[_Field], n: int) -> bytes:
    """Rows of different layouts: compute every field's offset, then copy each column into place."""
    sizes = []
    for kind, data, null in fields:
        if isinstance(data, _Text):
            sizes.append(4 + data.lengths)
        else:
            width = _FIXED[kind][1]
            sizes.append(np.full(n, 4 + width, dtype=np.int64) if null is None
                         else np.where(null, 4, 4 + width).astype(np.int64))
    row_size = 2 + np.sum(sizes, axis=0)
    row_start = np.concatenate(([0], np.cumsum(row_size)[:-1]))
    buf = np.empty(int(row_size.sum()), dtype=np.uint8)
    count = np.frombuffer(struct.pack(">h", len(fields)), dtype=np.uint8)
    buf[row_start[:, None] + np.arange(2)] = count
    pos = row_start + 2
    four = np.arange(4)
    for (kind, data, null), size in zip(fields, sizes, strict=True):
        if isinstance(data, _Text):
            lengths = data.lengths
            buf[pos[:, None] + four] = lengths.astype(">i4").view(np.uint8).reshape(n, 4)
            total = int(lengths.sum())
            if total:
                starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
                dest = np.repeat(pos + 4 - starts, lengths) + np.arange(total)
                buf[dest] = np.frombuffer(data.blob, dtype=np.uint8)
        else:
            width = _FIXED[kind][1]
            block = np.empty((n, 4 + width), dtype=np.uint8)
            block[:, :4] = np.frombuffer(struct.pack(">i", width), dtype=np.uint8)
            block[:, 4:] = data.view(np.uint8).reshape(n, width)
            if null is None:
                buf[pos[:, None] + np.arange(4 + width)] = block
            else:
                ok = ~null
                buf[pos[ok][:, None] + np.arange(4 + width)] = block[ok]
                buf[pos[null][:, None] + four] = _NULL
        pos = pos + size
    return buf.tobytes()


def encode_sample_columns(batch: SampleColumns) -> bytes:
    """The COPY binary payload of a batch, columns in `SAMPLE_COLUMNS` order."""
    n = len(batch)
    columns: list[tuple[str, object]] = [("timestamptz", batch.ts), ("text", batch.node),
                                         ("text", batch.gpu_uuid)]
    for name, pg_type in zip(SAMPLE_COLUMNS[3:], SAMPLE_PG_TYPES[3:], strict=True):
        values = batch.metrics.get(name)
        columns.append((pg_type, values if values is not None else _null_column(pg_type, n)))
    return encode_copy_binary(columns, n)
