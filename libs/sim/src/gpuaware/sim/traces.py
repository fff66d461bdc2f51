"""Loaders for the openb trace format (Alibaba cluster-trace-gpu-v2023, the FGD paper's traces).

Every row is validated; a malformed row, an unknown GPU type or a negative request raises TraceError
naming the file and line, because a silently skipped row would quietly change what is evaluated.
The traces are research-use-only data and stay outside the repository: callers pass paths (see
`shared_data_dir`).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpuaware.placement import GPU_CATALOG, MILLI, NodeSpec, PodRequest, RequestError

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
MAX_NODE_GPUS = 64
"""the most GPUs one node (and so one pod) may hold, as telemetry's batch limit: the cluster keeps a
row of GPU slots per node, so a count of a billion would allocate gigabytes before the first pod"""
MAX_QUANTITY = 2**40
"""the most any other count in a trace may be (CPU millicores, MiB, iterations): a million times a
real machine, and far enough below 2**63 that sums over a cluster never overflow numpy's int64"""


class TraceError(ValueError):
    """A trace file cannot be used as given. Permanent: the message names file, line and field."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod of a trace: its request plus the timing the trace recorded (seconds, relative)."""

    request: PodRequest
    creation_time: float | None = None
    deletion_time: float | None = None
    scheduled_time: float | None = None
    phase: str = ""
    line: int = 0


def shared_data_dir(repo_root: Path | None = None) -> Path:
    """GPUAWARE_SHARED_DATA, or ../shared/data next to the repository root."""
    env = os.environ.get("GPUAWARE_SHARED_DATA")
    if env:
        return Path(env)
    root = repo_root if repo_root is not None else Path(__file__).resolve().parents[5]
    return root.parent / "shared" / "data"


def _unreadable(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start} of the chunk read)"
    return f"not CSV: {exc}"


def _open_rows(path: Path, required: Iterable[str]) -> tuple[list[str], Iterable[tuple[int, dict[str, str]]]]:
    path = Path(path)
    if not path.is_file():
        raise TraceError(path, None, "file not found")
    handle = path.open(newline="", encoding="utf-8")
    reader = csv.reader(handle)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        handle.close()
        raise TraceError(path, 1, "empty file (no header)") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        handle.close()
        raise TraceError(path, 1, _unreadable(exc)) from None
    missing = [c for c in required if c not in header]
    if missing:
        handle.close()
        raise TraceError(path, 1, f"missing column(s) {', '.join(missing)}; header is {','.join(header)}")

    def rows() -> Iterable[tuple[int, dict[str, str]]]:
        with handle:
            while True:
                try:
                    fields = next(reader)
                except StopIteration:
                    return
                except (UnicodeDecodeError, csv.Error) as exc:
                    raise TraceError(path, reader.line_num + 1, _unreadable(exc)) from None
                if not fields or all(not f.strip() for f in fields):
                    continue
                if len(fields) != len(header):
                    raise TraceError(path, reader.line_num, f"expected {len(header)} fields, got {len(fields)}")
                yield reader.line_num, dict(zip(header, (f.strip() for f in fields), strict=True))

    return header, rows()


def int_field(path: Path, line: int, row: dict[str, str], column: str, *, least: int = 0,
              most: int = MAX_QUANTITY) -> int:
    """`row[column]` as a whole number within `[least, most]` ("4" or "4.0"), else a `TraceError`
    naming the file, the line and the value."""
    text = row[column]
    try:
        value = float(text)
    except ValueError:
        raise TraceError(path, line, f"{column}={text!r} is not an integer") from None
    if not math.isfinite(value) or value != int(value):
        raise TraceError(path, line, f"{column}={text!r} is not an integer")
    if value < least:
        raise TraceError(path, line, f"{column}={text!r} is negative" if least == 0
                         else f"{column}={text!r} must be at least {least}")
    if value > most:
        raise TraceError(path, line, f"{column}={text!r} is above {most} (the most this field may be)")
    return int(value)


def _time(path: Path, line: int, row: dict[str, str], column: str) -> float | None:
    text = row.get(column, "")
    if text in ("", "nan", "NaN"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise TraceError(path, line, f"{column}={text!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(path, line, f"{column}={text!r} is not a finite time")
    return value


def load_nodes(path: Path | str, known_models: Iterable[str] | None = None) -> list[NodeSpec]:
    """Nodes from an openb node list (sn, cpu_milli, memory_mib, gpu, model)."""
    path = Path(path)
    known = set(GPU_CATALOG if known_models is None else known_models)
    _, rows = _open_rows(path, NODE_COLUMNS)
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for line, row in rows:
        name = row["sn"]
        if not name:
            raise TraceError(path, line, "empty node name (sn)")
        if name in seen:
            raise TraceError(path, line, f"duplicate node {name!r}")
        seen.add(name)
        gpus = int_field(path, line, row, "gpu", most=MAX_NODE_GPUS)
        model = row["model"] if row["model"] not in ("nan", "NaN") else ""
        if gpus > 0 and model not in known:
            raise TraceError(path, line, f"unknown GPU type {model!r}; known: {', '.join(sorted(known))}")
        try:
            nodes.append(NodeSpec(name, int_field(path, line, row, "cpu_milli"), int_field(path, line, row, "memory_mib"),
                                  gpus, model if gpus > 0 else ""))
        except RequestError as exc:
            raise TraceError(path, line, str(exc)) from None
    if not nodes:
        raise TraceError(path, None, "no nodes")
    return nodes


def load_pods(path: Path | str, known_models: Iterable[str] | None = None) -> list[TracePod]:
    """Pods from an openb pod list; gpu_spec types must be known GPU models."""
    path = Path(path)
    known = set(GPU_CATALOG if known_models is None else known_models)
    header, rows = _open_rows(path, POD_COLUMNS)
    has_spec = "gpu_spec" in header
    pods: list[TracePod] = []
    seen: set[str] = set()
    for line, row in rows:
        name = row["name"]
        if name in seen:
            raise TraceError(path, line, f"duplicate pod {name!r}")
        seen.add(name)
        num_gpu = int_field(path, line, row, "num_gpu", most=MAX_NODE_GPUS)
        gpu_milli = int_field(path, line, row, "gpu_milli")
        if gpu_milli > MILLI:
            raise TraceError(path, line, f"gpu_milli={gpu_milli} is above {MILLI} (one whole GPU)")
        types: tuple[str, ...] = ()
        if has_spec and row["gpu_spec"] not in ("", "nan", "NaN"):
            types = tuple(t for t in row["gpu_spec"].split("|") if t)
            unknown = [t for t in types if t not in known]
            if unknown:
                raise TraceError(path, line, f"unknown GPU type(s) {', '.join(unknown)} in gpu_spec")
        try:
            request = PodRequest(
                name=name,
                cpu_milli=int_field(path, line, row, "cpu_milli"),
                memory_mib=int_field(path, line, row, "memory_mib"),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_types=types if num_gpu > 0 else (),
                qos=row.get("qos", ""),
            )
        except RequestError as exc:
            raise TraceError(path, line, str(exc)) from None
        pods.append(
            TracePod(
                request,
                _time(path, line, row, "creation_time"),
                _time(path, line, row, "deletion_time"),
                _time(path, line, row, "scheduled_time"),
                row.get("pod_phase", ""),
                line,
            )
        )
    if not pods:
        raise TraceError(path, None, "no pods")
    return pods


def write_nodes(path: Path | str, nodes: Iterable[NodeSpec]) -> None:
    with Path(path).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(NODE_COLUMNS)
        for n in nodes:
            w.writerow([n.name, n.cpu_milli, n.memory_mib, n.num_gpu, n.gpu_model])


def write_pods(path: Path | str, pods: Iterable[TracePod | PodRequest]) -> None:
    with Path(path).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(POD_COLUMNS + POD_OPTIONAL)
        for p in pods:
            tp = p if isinstance(p, TracePod) else TracePod(p)
            r = tp.request

            def fmt(t: float | None) -> str:
                return "" if t is None else f"{t:g}"

            w.writerow([r.name, r.cpu_milli, r.memory_mib, r.num_gpu, r.gpu_milli, r.gpu_spec, r.qos, tp.phase,
                        fmt(tp.creation_time), fmt(tp.deletion_time), fmt(tp.scheduled_time)])
