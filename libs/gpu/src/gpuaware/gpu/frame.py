"""GpuFrame: the columnar samples every backend returns, one numpy array per metric.

Why columns and not a list of ``GpuSample`` objects: the simulated fleet samples 10,000 GPUs per
tick with a handful of numpy operations, and the wire message (``GpuSampled``) is columnar too, so
a frame turns into messages with one ``tolist()`` per column instead of 250,000 attribute reads.
NVML and the DCGM scrape produce rows naturally; ``GpuFrame.from_samples`` pivots them once.

The columns are exactly ``gpuaware.schemas.METRIC_COLUMNS`` and their kinds and bounds are read from
the ``GpuSample`` type annotations, so a metric added to the schema is a column here without an
edit. "Missing" (NVML NotSupported, a MIG GPU, a DCGM blank) is NaN in float columns and -1 in
integer and boolean columns: every integer metric of the contract is non-negative, so -1 cannot be
a real value.

Values outside the range the schema declares (a 9.2e18 DCGM sentinel, a temperature of 2^31 from a
GPU falling off the bus) are turned into "missing" when the frame is built and counted in
``dropped``: one absurd value must not make the collector dead-letter a whole node's batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import msgspec.inspect as mi
import numpy as np
from numpy.typing import ArrayLike

from gpuaware.schemas import METRIC_COLUMNS, GpuSample, GpuSampled

__all__ = ["COLUMNS", "ColumnSpec", "GpuFrame", "missing_column"]

Kind = Literal["f", "i", "b"]


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """Kind and bounds of one metric column, as the schema declares them."""

    name: str
    kind: Kind
    lo: float | None = None
    hi: float | None = None

    @property
    def dtype(self) -> type[np.generic]:
        dtypes: dict[str, type[np.generic]] = {"f": np.float64, "i": np.int64, "b": np.int8}
        return dtypes[self.kind]

    @property
    def missing(self) -> float:
        return math.nan if self.kind == "f" else -1


def _spec_of(name: str, t: mi.Type) -> ColumnSpec:
    if isinstance(t, mi.UnionType):
        t = next(x for x in t.types if not isinstance(x, mi.NoneType))
    if isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.BoolType):
        return ColumnSpec(name, "b", 0, 1)
    if isinstance(t, mi.IntType):
        return ColumnSpec(name, "i", t.ge if t.ge is not None else 0, t.le)
    if isinstance(t, mi.FloatType):
        return ColumnSpec(name, "f", t.ge, t.le)
    raise TypeError(f"GpuSample.{name}: unsupported column type {t!r}")


_FIELDS = {f.name: f.type for f in cast(mi.StructType, mi.type_info(GpuSample)).fields}
#: every metric column of the contract, in wire order
COLUMNS: Mapping[str, ColumnSpec] = {name: _spec_of(name, _FIELDS[name]) for name in METRIC_COLUMNS}


def missing_column(name: str, n: int) -> np.ndarray:
    """A column of ``n`` missing values of the right dtype."""
    spec = COLUMNS[name]
    return np.full(n, spec.missing, dtype=spec.dtype)


def _coerce(spec: ColumnSpec, values: ArrayLike, n: int) -> tuple[np.ndarray, int]:
    """Cast to the column dtype; out-of-range and non-finite values become missing (counted)."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        raw = values.astype(np.float64, copy=False)
    else:
        numbers = cast("Sequence[float | None]", values)  # not an array: numbers, None where missing
        raw = np.array([math.nan if v is None else float(v) for v in numbers], dtype=np.float64)
    if raw.shape != (n,):
        raise ValueError(f"column `{spec.name}` has shape {raw.shape}, expected ({n},)")
    was_missing = np.isnan(raw) if spec.kind == "f" else (np.isnan(raw) | (raw == -1))
    bad = ~np.isfinite(raw)
    if spec.lo is not None:
        bad |= raw < spec.lo
    if spec.hi is not None:
        bad |= raw > spec.hi
    if spec.kind == "i":
        bad |= raw > 2**62  # beyond int64 after rounding, and every DCGM int64 blank sentinel
    dropped = int(np.count_nonzero(bad & ~was_missing))
    if spec.kind == "f":
        out = np.where(bad, math.nan, raw)
    else:
        out = np.where(bad, -1, np.rint(np.where(bad, 0, raw))).astype(spec.dtype)
    out.flags.writeable = False
    return out, dropped


def _missing_mask(spec: ColumnSpec, col: np.ndarray) -> np.ndarray:
    return np.isnan(col) if spec.kind == "f" else col < 0


@dataclass(frozen=True, eq=False, slots=True)
class GpuFrame:
    """Samples of many GPUs (one or many nodes) at one instant, one read-only array per metric.

    GPUs of node ``nodes[k]`` are rows ``bounds[k]:bounds[k+1]``. Build it with ``build`` or
    ``from_samples`` (they cast and sanitise), never with the bare constructor.
    """

    sampled_at: float
    nodes: tuple[str, ...]
    bounds: np.ndarray
    gpu_uuid: tuple[str, ...]
    gpu_index: np.ndarray
    columns: Mapping[str, np.ndarray]
    dropped: int = 0
    """values outside the schema's range that were turned into "missing" while building"""

    # --- construction ---------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        *,
        sampled_at: float,
        nodes: Sequence[str],
        bounds: ArrayLike,
        gpu_uuid: Sequence[str],
        gpu_index: ArrayLike,
        columns: Mapping[str, ArrayLike],
    ) -> GpuFrame:
        """Cast every column to its dtype, fill absent ones with "missing", drop absurd values."""
        n = len(gpu_uuid)
        b = np.asarray(bounds, dtype=np.int64)
        if b.shape != (len(nodes) + 1,) or b[0] != 0 or b[-1] != n or np.any(np.diff(b) < 0):
            raise ValueError(f"bounds {b.tolist()} do not split {n} GPUs over {len(nodes)} node(s)")
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown metric column(s): {sorted(unknown)}")
        index = np.asarray(gpu_index, dtype=np.int64)
        index.flags.writeable = False
        out: dict[str, np.ndarray] = {}
        dropped = 0
        for name, spec in COLUMNS.items():
            if name in columns:
                out[name], d = _coerce(spec, columns[name], n)
                dropped += d
            else:
                col = missing_column(name, n)
                col.flags.writeable = False
                out[name] = col
        return cls(float(sampled_at), tuple(nodes), b, tuple(gpu_uuid), index, out, dropped)

    @classmethod
    def from_samples(cls, node: str, sampled_at: float, rows: Sequence[GpuSample]) -> GpuFrame:
        """Pivot one node's rows (NVML, DCGM) into a frame."""
        columns = {name: [getattr(r, name) for r in rows] for name in COLUMNS}
        return cls.build(
            sampled_at=sampled_at,
            nodes=(node,),
            bounds=(0, len(rows)),
            gpu_uuid=[r.gpu_uuid for r in rows],
            gpu_index=[r.gpu_index for r in rows],
            columns=columns,
        )

    @classmethod
    def concat(cls, frames: Iterable[GpuFrame]) -> GpuFrame:
        """Frames of different nodes taken at the same tick, as one frame (``sampled_at`` = the latest)."""
        parts = list(frames)
        if not parts:
            raise ValueError("concat needs at least one frame")
        sizes = [len(f) for f in parts]
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        bounds = np.concatenate([[0]] + [f.bounds[1:] + o for f, o in zip(parts, offsets, strict=True)])
        columns = {name: np.concatenate([f.columns[name] for f in parts]) for name in COLUMNS}
        for col in columns.values():
            col.flags.writeable = False
        index = np.concatenate([f.gpu_index for f in parts])
        index.flags.writeable = False
        return cls(
            max(f.sampled_at for f in parts),
            tuple(n for f in parts for n in f.nodes),
            bounds,
            tuple(u for f in parts for u in f.gpu_uuid),
            index,
            columns,
            sum(f.dropped for f in parts),
        )

    # --- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.gpu_uuid)

    def column(self, name: str) -> np.ndarray:
        """The raw read-only array of one metric (NaN / -1 = missing)."""
        return self.columns[name]

    def present(self, name: str) -> np.ndarray:
        """Boolean mask: which GPUs report ``name``."""
        return ~_missing_mask(COLUMNS[name], self.columns[name])

    def value(self, name: str, row: int) -> Any:
        """One value as the message would carry it (``None`` when missing)."""
        spec = COLUMNS[name]
        v = self.columns[name][row]
        if spec.kind == "f":
            return None if math.isnan(v) else float(v)
        if v < 0:
            return None
        return bool(v) if spec.kind == "b" else int(v)

    def node_of(self, row: int) -> str:
        return self.nodes[int(np.searchsorted(self.bounds, row, side="right")) - 1]

    def for_node(self, node: str) -> GpuFrame:
        """The rows of one node (views, no copy)."""
        k = self.nodes.index(node)
        s, e = int(self.bounds[k]), int(self.bounds[k + 1])
        return GpuFrame(
            self.sampled_at,
            (node,),
            np.array([0, e - s], dtype=np.int64),
            self.gpu_uuid[s:e],
            self.gpu_index[s:e],
            {name: col[s:e] for name, col in self.columns.items()},
            0,
        )

    def rows(self) -> Iterator[GpuSample]:
        """One ``GpuSample`` per GPU (for tests and row-minded consumers; slow on big frames)."""
        lists = {name: self._pylist(name) for name in COLUMNS}
        for i, (uuid, index) in enumerate(zip(self.gpu_uuid, self.gpu_index.tolist(), strict=True)):
            yield GpuSample(gpu_uuid=uuid, gpu_index=index, **{n: col[i] for n, col in lists.items()})

    def _pylist(self, name: str) -> list[Any]:
        spec = COLUMNS[name]
        col = self.columns[name]
        miss = _missing_mask(spec, col)
        vals = col > 0 if spec.kind == "b" else col
        if not miss.any():
            return vals.tolist()
        obj = vals.astype(object)
        obj[miss] = None
        return obj.tolist()

    # --- to the wire ----------------------------------------------------------------------------
    def to_messages(
        self,
        *,
        source: str,
        interval_s: float,
        emitted_at: float | None = None,
        seq: int | Mapping[str, int] = 0,
        cluster: str = "default",
    ) -> list[GpuSampled]:
        """One ``GpuSampled`` per node. A metric no GPU of a node reports is an empty column there."""
        starts, ends = self.bounds[:-1].tolist(), self.bounds[1:].tolist()
        lists: dict[str, list[Any]] = {}
        absent: dict[str, list[bool]] = {}
        for name, spec in COLUMNS.items():
            miss = _missing_mask(spec, self.columns[name])
            cs = np.concatenate(([0], np.cumsum(miss)))
            n_miss = cs[self.bounds[1:]] - cs[self.bounds[:-1]]
            absent[name] = (n_miss == np.diff(self.bounds)).tolist()
            lists[name] = self._pylist(name)
        uuids = self.gpu_uuid
        indexes = self.gpu_index.tolist()
        emitted = self.sampled_at if emitted_at is None else emitted_at
        out: list[GpuSampled] = []
        for k, node in enumerate(self.nodes):
            s, e = starts[k], ends[k]
            cols = {name: tuple(lists[name][s:e]) for name in COLUMNS if not absent[name][k]}
            out.append(
                GpuSampled(
                    source=source,
                    emitted_at=emitted,
                    cluster=cluster,
                    node=node,
                    sampled_at=self.sampled_at,
                    interval_s=interval_s,
                    seq=seq if isinstance(seq, int) else seq.get(node, 0),
                    gpu_uuid=uuids[s:e],
                    gpu_index=tuple(indexes[s:e]),
                    **cols,
                )
            )
        return out
