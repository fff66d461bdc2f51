"""Trace loaders: good files round-trip; bad rows fail naming file and line, never skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaware.sim import (
    TraceError,
    load_nodes,
    load_pods,
    synthetic_nodes,
    synthetic_pods,
    write_nodes,
    write_pods,
)

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"


def test_round_trip(tmp_path: Path) -> None:
    nodes = synthetic_nodes(20, seed=1)
    pods = synthetic_pods(50, seed=2, gpu_types=("T4",), typed_fraction=0.5)
    write_nodes(tmp_path / "n.csv", nodes)
    write_pods(tmp_path / "p.csv", pods)
    assert load_nodes(tmp_path / "n.csv") == nodes
    assert [p.request for p in load_pods(tmp_path / "p.csv")] == pods


def test_minimal_pod_columns_are_enough(tmp_path: Path) -> None:
    # the multigpu traces carry only the five request columns
    (tmp_path / "p.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,10,2,1000\np2,500,1,0,0\n")
    pods = load_pods(tmp_path / "p.csv")
    assert [(p.request.num_gpu, p.request.gpu_milli, p.line) for p in pods] == [(2, 1000, 2), (0, 0, 3)]


@pytest.mark.parametrize(
    "rows, line, message",
    [
        (["p1,1000,10,1,500,,LS,Running,0,1,0", "p2,1000,10,1"], 3, "expected 11 fields, got 4"),
        (["p1,1000,10,1,500,,LS,Running,0,1,0", "p2,abc,10,1,500,,LS,Running,0,1,0"], 3, "cpu_milli='abc' is not an integer"),
        (["p1,-1000,10,1,500,,LS,Running,0,1,0"], 2, "cpu_milli='-1000' is negative"),
        (["p1,1000,10,1,500,H200|T4,LS,Running,0,1,0"], 2, "unknown GPU type"),
        (["p1,1000,10,1,1500,,LS,Running,0,1,0"], 2, "above 1000"),
        (["p1,1000,10,2,500,,LS,Running,0,1,0"], 2, "must take whole GPUs"),
        (["p1,1000,10,0,300,,LS,Running,0,1,0"], 2, "without any GPU"),
        (["p1,1000,10,1,500,,LS,Running,x,1,0"], 2, "creation_time='x'"),
        (["p1,1000,10,1,500,,LS,Running,0,1,0", "p1,1000,10,1,500,,LS,Running,0,1,0"], 3, "duplicate pod"),
    ],
)
def test_bad_pod_rows_name_file_and_line(tmp_path: Path, rows: list[str], line: int, message: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("\n".join([POD_HEADER, *rows]) + "\n")
    with pytest.raises(TraceError, match=message) as info:
        load_pods(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert info.value.line == line


@pytest.mark.parametrize(
    "text, message",
    [
        ("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,100,2,Z9\n", "n.csv:2: unknown GPU type 'Z9'"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,-100,2,T4\n", "n.csv:2: memory_mib='-100' is negative"),
        ("sn,cpu_milli,memory_mib,gpu\nn1,1000,100,2\n", "n.csv:1: missing column"),
        ("", "n.csv:1: empty file"),
        ("sn,cpu_milli,memory_mib,gpu,model\n", "n.csv: no nodes"),
    ],
)
def test_bad_node_files(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "n.csv").write_text(text)
    with pytest.raises(TraceError, match=message):
        load_nodes(tmp_path / "n.csv")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="file not found"):
        load_pods(tmp_path / "absent.csv")


def test_real_openb_files_load(shared_data: Path) -> None:
    nodes = load_nodes(shared_data / "openb" / "openb_node_list_gpu_node.csv")
    assert (len(nodes), sum(n.num_gpu for n in nodes)) == (1213, 6212)
    pods = load_pods(shared_data / "openb" / "openb_pod_list_gpuspec25.csv")
    assert len(pods) == 8152 and any(p.request.gpu_types for p in pods)
