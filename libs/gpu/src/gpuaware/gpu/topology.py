"""Where the GPUs of a node sit relative to each other: link matrix, CPU/NUMA affinity, NVLink islands.

Two sources give the same ``Topology``:

* ``parse_topo_matrix(text)`` reads ``nvidia-smi topo -m`` output as it is found in the wild: raw
  TAB-separated (header starting with a tab, self cell ``" X "``, an empty field between
  ``NUMA Affinity`` and ``GPU NUMA ID``), tab-expanded copies from docs (a 7-character NIC name
  followed by a single space, so splitting on "two or more spaces" is wrong), ANSI underline escapes
  from a TTY, old (``mlx5_0`` columns, ``SOC``) and new (``NIC0`` + "NIC Legend") drivers. Multi-word
  headers are protected, then rows split on tabs when present, else on whitespace.
* ``Topology.from_nvml(levels, nvlinks)`` builds it from ``nvmlDeviceGetTopologyCommonAncestor``
  levels (PCIe only) plus per-pair NVLink counts, which NVML reports separately: NVLink is not a
  topology level.

Placement consumes *islands*: connected components of the graph whose edges are NV# links. An
NVSwitch board is one island of 8; a PCIe box has no island (every GPU alone); pairwise bridges make
pairs. ``Topology.island_ids`` gives the opaque ids ``GpuInfo.nvlink_island`` carries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuaware.gpu.errors import TopologyParseError

__all__ = [
    "NVML_LEVEL_CODES",
    "PCIE_CODES",
    "Topology",
    "nvlink_count",
    "parse_cpu_list",
    "parse_topo_matrix",
]

#: PCIe path codes from closest to farthest (nvidia-smi legend)
PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS")

#: nvmlDeviceGetTopologyCommonAncestor level -> nvidia-smi code. INTERNAL (0) is two GPUs on one
#: board (K80/M60 style) behind the board's own switch, which nvidia-smi prints as PIX.
NVML_LEVEL_CODES: Mapping[int, str] = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_GPU = re.compile(r"^GPU\d+$")
_MULTI_WORD = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def nvlink_count(code: str) -> int:
    """``NV12`` -> 12; any PCIe code or ``X`` -> 0."""
    return int(code[2:]) if code.startswith("NV") else 0


def parse_cpu_list(text: str | None) -> frozenset[int] | None:
    """``"0-14,16-30"`` -> {0..14, 16..30}; ``None`` for ``N/A``, blanks and anything unreadable."""
    if not text or text.strip().upper() in ("N/A", "NA", "-"):
        return None
    out: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            return None
        out.update(range(int(lo), int(hi if sep else lo) + 1))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Topology:
    """GPU x GPU links, GPU x NIC links and per-GPU affinities of one node (GPU order = NVML index)."""

    gpus: tuple[str, ...]
    links: tuple[tuple[str, ...], ...]
    """``links[i][j]``: ``X`` on the diagonal, ``NV<n>`` or a ``PCIE_CODES`` entry elsewhere"""
    nics: tuple[str, ...] = ()
    nic_links: tuple[tuple[str, ...], ...] = ()
    """``nic_links[i][k]``: path from GPU i to NIC k"""
    cpu_affinity: tuple[str | None, ...] = ()
    numa_affinity: tuple[str | None, ...] = ()
    gpu_numa_id: tuple[str | None, ...] = ()
    nic_legend: Mapping[str, str] = field(default_factory=dict)
    """``NIC0`` -> ``mlx5_ib0`` (new drivers print NICn columns and this legend)"""

    def __post_init__(self) -> None:
        n = len(self.gpus)
        if len(self.links) != n or any(len(r) != n for r in self.links):
            raise ValueError(f"link matrix is not {n}x{n}")
        for i in range(n):
            if self.links[i][i] != "X":
                raise ValueError(f"{self.gpus[i]}: diagonal cell is {self.links[i][i]!r}, expected X")
            for j in range(i):
                if self.links[i][j] != self.links[j][i]:
                    raise ValueError(
                        f"asymmetric link {self.gpus[i]}-{self.gpus[j]}: "
                        f"{self.links[i][j]} vs {self.links[j][i]}"
                    )

    # --- construction from NVML -----------------------------------------------------------------
    @classmethod
    def from_nvml(
        cls,
        levels: Sequence[Sequence[int | None]],
        nvlinks: Sequence[Sequence[int]],
        *,
        cpu_affinity: Sequence[str | None] = (),
        numa_affinity: Sequence[str | None] = (),
    ) -> Topology:
        """Build from common-ancestor levels (None = unknown -> SYS) and NVLink counts per pair."""
        n = len(levels)
        links = []
        for i in range(n):
            row = []
            for j in range(n):
                if i == j:
                    row.append("X")
                elif nvlinks[i][j] > 0:
                    row.append(f"NV{nvlinks[i][j]}")
                else:
                    level = levels[i][j]
                    row.append(NVML_LEVEL_CODES.get(level, "SYS") if level is not None else "SYS")
            links.append(tuple(row))
        return cls(
            gpus=tuple(f"GPU{i}" for i in range(n)),
            links=tuple(links),
            cpu_affinity=tuple(cpu_affinity),
            numa_affinity=tuple(numa_affinity),
        )

    # --- questions placement asks -----------------------------------------------------------------
    def link(self, i: int, j: int) -> str:
        return self.links[i][j]

    def nvlinks(self, i: int, j: int) -> int:
        return nvlink_count(self.links[i][j])

    def nvlink_islands(self) -> tuple[tuple[int, ...], ...]:
        """Connected components over NV# links, every GPU in exactly one (singletons included),
        ordered by their lowest GPU index."""
        n = len(self.gpus)
        parent = list(range(n))

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        for i in range(n):
            for j in range(i + 1, n):
                if self.nvlinks(i, j) > 0:
                    parent[find(j)] = find(i)
        groups: dict[int, list[int]] = {}
        for i in range(n):
            groups.setdefault(find(i), []).append(i)
        return tuple(sorted((tuple(g) for g in groups.values()), key=lambda g: g[0]))

    def island_ids(self, prefix: str) -> tuple[str | None, ...]:
        """Per GPU: ``"<prefix>/nvl<k>"`` for members of a multi-GPU island, ``None`` when the GPU
        has no NVLink peer (what ``GpuInfo.nvlink_island`` expects)."""
        out: list[str | None] = [None] * len(self.gpus)
        k = 0
        for island in self.nvlink_islands():
            if len(island) > 1:
                for i in island:
                    out[i] = f"{prefix}/nvl{k}"
                k += 1
        return tuple(out)

    def nvlink_links(self, i: int) -> int:
        """Largest NV# bond of GPU i: its link count on NVSwitch boards (``NV12`` -> 12)."""
        return max((self.nvlinks(i, j) for j in range(len(self.gpus)) if j != i), default=0)

    def cpus(self, i: int) -> frozenset[int] | None:
        return parse_cpu_list(self.cpu_affinity[i] if i < len(self.cpu_affinity) else None)

    def numa_nodes(self, i: int) -> frozenset[int] | None:
        return parse_cpu_list(self.numa_affinity[i] if i < len(self.numa_affinity) else None)

    def numa_node(self, i: int) -> int | None:
        """The one NUMA node GPU i hangs off; None when unknown or when the affinity spans several
        (e.g. ``0-7`` on an NPS4 host: no single socket-local node to prefer)."""
        nodes = self.numa_nodes(i)
        if nodes is not None and len(nodes) == 1:
            return next(iter(nodes))
        gid = self.gpu_numa_id[i] if i < len(self.gpu_numa_id) else None
        return int(gid) if gid is not None and gid.isdigit() else None

    def nearest_nics(self, i: int) -> tuple[str, ...]:
        """NICs on the shortest PCIe path from GPU i (legend names when the driver printed NICn)."""
        if not self.nics:
            return ()
        rank = {c: k for k, c in enumerate(PCIE_CODES)}
        best = min(rank.get(c, len(rank)) for c in self.nic_links[i])
        return tuple(
            self.nic_legend.get(nic, nic)
            for nic, c in zip(self.nics, self.nic_links[i], strict=True)
            if rank.get(c, len(rank)) == best
        )


def _split(line: str) -> list[str]:
    """Tab-separated when tabs are present (keeps empty fields), else whitespace."""
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return line.split()


def _split_header(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t") if c.strip()]
    for words in _MULTI_WORD:
        line = line.replace(words, words.replace(" ", "\x00"))
    return [c.replace("\x00", " ") for c in line.split()]


def parse_topo_matrix(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m`` output (see the module docstring for the variants accepted)."""
    lines = [_ANSI.sub("", raw).rstrip("\r\n") for raw in text.splitlines()]
    header_at = None
    for n, line in enumerate(lines):
        tokens = line.split()
        if tokens and tokens[0] == "GPU0" and (len(tokens) == 1 or not _CELL.match(tokens[1])):
            header_at = n
            break
    if header_at is None:
        raise TopologyParseError(None, "no header line starting with GPU0 (is this `nvidia-smi topo -m`?)")
    columns = _split_header(lines[header_at])
    n_dev = next((k for k, c in enumerate(columns) if c in _MULTI_WORD), len(columns))
    devices, extra_names = columns[:n_dev], columns[n_dev:]
    gpu_cols = [c for c in devices if _GPU.match(c)]
    nic_cols = [c for c in devices if not _GPU.match(c)]
    if devices[: len(gpu_cols)] != gpu_cols:
        raise TopologyParseError(header_at + 1, f"GPU columns are not first: {devices}")

    rows: dict[str, tuple[list[str], dict[str, str]]] = {}
    end = len(lines)
    for n in range(header_at + 1, len(lines)):
        line = lines[n]
        if not line.strip() or line.strip().startswith("Legend"):
            end = n
            break
        fields = _split(line)
        label, values = fields[0], fields[1:]
        if label not in devices:
            raise TopologyParseError(n + 1, f"row {label!r} is not a header column")
        if len(values) < n_dev:
            raise TopologyParseError(n + 1, f"row {label} has {len(values)} cells, expected at least {n_dev}")
        cells = ["SYS" if v == "SOC" else v for v in values[:n_dev]]
        for c in cells:
            if not _CELL.match(c):
                raise TopologyParseError(n + 1, f"row {label}: unknown link code {c!r}")
        extras = [v for v in values[n_dev:] if v != ""]
        if len(extras) > len(extra_names):
            raise TopologyParseError(n + 1, f"row {label}: {len(extras)} affinity values for {extra_names}")
        rows[label] = (cells, dict(zip(extra_names, extras, strict=False)))

    missing = [g for g in gpu_cols if g not in rows]
    if missing:
        raise TopologyParseError(None, f"no row for {', '.join(missing)}")
    legend: dict[str, str] = {}
    for line in lines[end:]:
        m = _LEGEND.match(line)
        if m:
            legend[m.group(1)] = m.group(2)

    g = len(gpu_cols)
    gpu_rows = [rows[name] for name in gpu_cols]
    try:
        return Topology(
            gpus=tuple(gpu_cols),
            links=tuple(tuple(cells[:g]) for cells, _ in gpu_rows),
            nics=tuple(nic_cols),
            nic_links=tuple(tuple(cells[g:]) for cells, _ in gpu_rows),
            cpu_affinity=tuple(extra.get("CPU Affinity") for _, extra in gpu_rows),
            numa_affinity=tuple(extra.get("NUMA Affinity") for _, extra in gpu_rows),
            gpu_numa_id=tuple(extra.get("GPU NUMA ID") for _, extra in gpu_rows),
            nic_legend=legend,
        )
    except ValueError as exc:
        raise TopologyParseError(None, str(exc)) from exc
