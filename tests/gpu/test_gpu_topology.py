"""`nvidia-smi topo -m` parsing on the five real matrices in ../shared/k8s/topology/."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaware.gpu import Topology, TopologyParseError, parse_topo_matrix
from gpuaware.gpu.topology import parse_cpu_list

ALL8 = ((0, 1, 2, 3, 4, 5, 6, 7),)
ALONE4 = ((0,), (1,), (2,), (3,))

# file, islands, links checked, NUMA node per GPU, nearest NIC(s) of GPU 0, CPUs of GPU 0
CASES = [
    # DGX A100: NV12 between every pair (NVSwitch) -> one island of 8; NUMA Affinity "0-7" (NPS4-style,
    # kept verbatim) spans 8 nodes so no single node, GPUs 2/3 say "1"; GPU0 reaches mlx5_0/1 over PXB
    ("topo-dgx-a100.txt", ALL8, {(0, 1): "NV12", (3, 7): "NV12"}, [None, None, 1, 1, None, None, None, None],
     ("mlx5_0", "mlx5_1"), 30),  # 0-14,16-30 = 15 + 15 CPUs
    # DGX H100: NV18 everywhere; NIC0..NIC12 resolved through the NIC Legend (NIC0 = mlx5_ib0 over PIX)
    ("topo-dgx-h100.txt", ALL8, {(0, 7): "NV18"}, [0, 0, 0, 0, 1, 1, 1, 1], ("mlx5_ib0",), 112),  # 0-55,112-167
    # HGX 4-GPU, raw TABs with the empty field before GPU NUMA ID; the only NIC is SYS away
    ("topo-hgx-a100-4gpu-raw-tabs.txt", ((0, 1, 2, 3),), {(1, 2): "NV12"}, [1, 1, 1, 1], ("rocep49s0",), 64),
    # PCIe only: pairs behind one switch (PIX), SYS across sockets -> no NVLink islands at all
    ("topo-pcie-4gpu.txt", ALONE4, {(0, 1): "PIX", (2, 3): "PIX", (0, 2): "SYS"}, [0, 0, 1, 1],
     ("mlx4_0",), 12),  # GPU0 only has SYS to mlx4_0: still the nearest
    ("topo-pcie-4gpu-newformat.txt", ALONE4, {(0, 1): "PIX", (1, 3): "SYS"}, [3, 3, 4, 4], ("mlx5_0",), 16),
]  # fmt: skip


@pytest.mark.parametrize("name, islands, links, numa, nics, n_cpus", CASES, ids=[c[0] for c in CASES])
def test_real_matrices(
    k8s_facts: Path, name: str, islands: tuple, links: dict, numa: list, nics: tuple, n_cpus: int
) -> None:
    topo = parse_topo_matrix((k8s_facts / "topology" / name).read_text())
    assert topo.gpus == tuple(f"GPU{i}" for i in range(len(numa)))
    assert topo.nvlink_islands() == islands
    for (i, j), code in links.items():
        assert topo.link(i, j) == code and topo.link(j, i) == code
    assert [topo.numa_node(i) for i in range(len(numa))] == numa
    assert topo.nearest_nics(0) == nics
    assert len(topo.cpus(0)) == n_cpus
    ids = topo.island_ids("node-a")
    if len(islands) == 1:
        assert set(ids) == {"node-a/nvl0"}
    else:
        assert set(ids) == {None}  # a GPU with no NVLink peer has no island


def test_trailing_columns_line_up(k8s_facts: Path) -> None:
    h100 = parse_topo_matrix((k8s_facts / "topology" / "topo-dgx-h100.txt").read_text())
    # topology.md: GPU0 extras ['0-55,112-167', '0', 'N/A']
    assert (h100.cpu_affinity[0], h100.numa_affinity[0], h100.gpu_numa_id[0]) == ("0-55,112-167", "0", "N/A")
    assert len(h100.nics) == 13 and h100.nic_legend["NIC12"] == "mlx5_eth4"
    a100 = parse_topo_matrix((k8s_facts / "topology" / "topo-dgx-a100.txt").read_text())
    assert a100.nics[-1] == "mlx5_10"  # 7 characters followed by a single space in the copy
    assert (a100.cpu_affinity[2], a100.numa_affinity[2]) == ("16-30,144-158", "1")
    assert a100.gpu_numa_id == (None,) * 8  # older driver: no GPU NUMA ID column


def test_tab_and_space_forms_agree(k8s_facts: Path) -> None:
    raw = (k8s_facts / "topology" / "topo-hgx-a100-4gpu-raw-tabs.txt").read_text()
    assert "\t" in raw
    spaced = raw.expandtabs(8)  # what a copy in a blog post looks like
    assert parse_topo_matrix(spaced) == parse_topo_matrix(raw)


def test_ansi_underlined_header_from_a_tty(k8s_facts: Path) -> None:
    raw = (k8s_facts / "topology" / "topo-pcie-4gpu-newformat.txt").read_text()
    first, rest = raw.split("\n", 1)
    tty = f"\x1b[4m{first}\x1b[0m\n{rest}"
    assert parse_topo_matrix(tty) == parse_topo_matrix(raw)


def test_header_without_leading_whitespace_and_old_soc_code() -> None:
    text = "GPU0 GPU1 GPU2 CPU Affinity\nGPU0 X NV2 SOC 0-7\nGPU1 NV2 X SOC 0-7\nGPU2 SOC SOC X 8-15\n"
    topo = parse_topo_matrix(text)
    assert topo.link(0, 2) == "SYS"  # very old drivers printed SOC
    assert topo.nvlink_islands() == ((0, 1), (2,))
    assert topo.island_ids("n") == ("n/nvl0", "n/nvl0", None)
    assert topo.cpus(2) == frozenset(range(8, 16))


def test_dgx1_hybrid_cube_mesh_is_one_island() -> None:
    # DGX-1 (V100): each GPU has NV1/NV2 to four peers, SYS to the rest; the mesh is connected
    nv = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1,
          (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}  # fmt: skip
    links = [["X" if i == j else f"NV{nv.get((min(i, j), max(i, j)))}" if (min(i, j), max(i, j)) in nv else "SYS"
              for j in range(8)] for i in range(8)]  # fmt: skip
    topo = Topology(gpus=tuple(f"GPU{i}" for i in range(8)), links=tuple(map(tuple, links)))
    assert topo.nvlink_islands() == ALL8
    assert topo.nvlinks(0, 3) == 2 and topo.nvlinks(0, 5) == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("nothing here\n", "no header line"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV12\nGPU1\tPIX\t X \n", "asymmetric link GPU1-GPU0"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV12\nGPU1\tNV12\t Y \n", "line 3: row GPU1: unknown link code 'Y'"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV12\n", "no row for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV12\t X \n", "line 2: row GPU0 has 1 cells"),
        ("\tGPU0\nGPU7\t X \n", "line 2: row 'GPU7' is not a header column"),
    ],
)
def test_bad_input_names_the_line(text: str, message: str) -> None:
    with pytest.raises(TopologyParseError, match=message):
        parse_topo_matrix(text)


@pytest.mark.parametrize(
    "text, expected",
    [("0-2,5", {0, 1, 2, 5}), ("7", {7}), ("N/A", None), ("", None), ("0-x", None), (None, None)],
)
def test_cpu_lists(text: str | None, expected: set[int] | None) -> None:
    assert parse_cpu_list(text) == (frozenset(expected) if expected is not None else None)


@pytest.mark.parametrize(
    "levels, nvlinks, expected",
    [
        # NVML common-ancestor levels map to nvidia-smi codes; an NVLink count overrides the PCIe level
        ([[0, 10], [10, 0]], [[0, 0], [0, 0]], "PIX"),
        ([[0, 20], [20, 0]], [[0, 0], [0, 0]], "PXB"),
        ([[0, 30], [30, 0]], [[0, 0], [0, 0]], "PHB"),
        ([[0, 40], [40, 0]], [[0, 0], [0, 0]], "NODE"),
        ([[0, 50], [50, 0]], [[0, 0], [0, 0]], "SYS"),
        ([[0, None], [None, 0]], [[0, 0], [0, 0]], "SYS"),  # unknown level: assume the farthest
        ([[0, 50], [50, 0]], [[0, 12], [12, 0]], "NV12"),
    ],
)
def test_from_nvml_levels(levels: list, nvlinks: list, expected: str) -> None:
    assert Topology.from_nvml(levels, nvlinks).link(0, 1) == expected
