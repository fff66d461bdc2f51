"""`gpuaware eval placement` writes the contract's summary.json and re-checkable assignments."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaware.cli.evaluate import app, parse_seeds
from gpuaware.sim import load_nodes, synthetic_nodes, synthetic_pods, write_nodes, write_pods

KEYS_AT = ["90", "95", "100", "110", "120", "130"]


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    write_nodes(tmp_path / "nodes.csv", synthetic_nodes(40, seed=1))
    write_pods(tmp_path / "pods.csv", synthetic_pods(500, seed=2, gpu_types=("T4", "G2"), typed_fraction=0.2))
    return tmp_path / "nodes.csv", tmp_path / "pods.csv"


def recheck(nodes_csv: Path, assignments_csv: Path) -> int:
    """Replay an assignments file against the node list; returns the number of placed pods."""
    nodes = {n.name: n for n in load_nodes(nodes_csv)}
    cpu = defaultdict(int)
    mem = defaultdict(int)
    gpu = defaultdict(int)
    placed = 0
    with assignments_csv.open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["seq"]) for r in rows] == list(range(len(rows)))
    for r in rows:
        if not r["node"]:
            assert r["gpus"] == ""
            continue
        placed += 1
        n = nodes[r["node"]]
        cpu[n.name] += int(r["cpu_milli"])
        mem[n.name] += int(r["memory_mib"])
        gpus = [int(g) for g in r["gpus"].split("|")] if r["gpus"] else []
        assert len(gpus) == int(r["num_gpu"]) and len(set(gpus)) == len(gpus)
        if r["gpu_spec"]:
            assert n.gpu_model in r["gpu_spec"].split("|")
        for g in gpus:
            assert 0 <= g < n.num_gpu
            gpu[(n.name, g)] += int(r["gpu_milli"])
        assert cpu[n.name] <= n.cpu_milli and mem[n.name] <= n.memory_mib
    assert all(v <= 1000 for v in gpu.values()), "a GPU is over-allocated"
    return placed


def test_cli_writes_contract_and_assignments(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = inputs
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["placement", "--nodes", str(nodes), "--trace", str(pods),
                                      "--policies", "fgd,BestFit", "--seeds", "42-43", "--out", str(out),
                                      "--assignments", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"trace", "nodes", "seeds", "policies"}
    assert summary["seeds"] == [42, 43] and summary["trace"] == str(pods) and summary["nodes"] == str(nodes)
    assert list(summary["policies"]) == ["FGD", "BestFit"]
    for s in summary["policies"].values():
        assert set(s) == {"alloc_pct_at", "unallocated_gpus_at", "frag_ratio_pct_at", "p99_decision_ms"}
        assert list(s["alloc_pct_at"]) == KEYS_AT and list(s["unallocated_gpus_at"]) == KEYS_AT
        assert list(s["frag_ratio_pct_at"]) == ["80", "90"]
        assert all(isinstance(v, float) for v in s["alloc_pct_at"].values())
    # a decision's p99 is in milliseconds: above zero and below the policy's longest run (in seconds there)
    with (out / "per_seed.csv").open() as f:
        run_ms = {(r["policy"], r["seed"]): float(r["run_seconds"]) * 1000 for r in csv.DictReader(f)}
    for name, s in summary["policies"].items():
        longest = max(ms for (policy, _seed), ms in run_ms.items() if policy == name)
        assert 0 < s["p99_decision_ms"] <= longest, (name, s["p99_decision_ms"], longest)
    assert (out / "alloc.png").stat().st_size > 1000
    for name in ("FGD-42", "FGD-43", "BestFit-42", "BestFit-43"):
        path = out / "assignments" / f"{name}.csv"
        assert path.read_text().splitlines()[0] == "seq,pod,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,node,gpus"
        assert recheck(nodes, path) > 100
    assert "FGD" in result.output and "130%" in result.output


def test_cli_bad_input_names_file_and_line(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, _ = inputs
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,100,1,1,500\np2,-3,1,1,500\n")
    result = CliRunner().invoke(app, ["placement", "--nodes", str(nodes), "--trace", str(bad), "--seeds", "1",
                                      "--out", str(tmp_path / "o"), "--jobs", "1"])
    assert result.exit_code == 2
    assert f"{bad}:3" in result.stderr.replace("\n", "") and "negative" in result.stderr
    assert "negative" not in result.stdout  # errors go to standard error, after the bar is closed


@pytest.mark.parametrize("command, value, bounds", [
    ("placement", "inf", "(0, 10]"), ("placement", "nan", "(0, 10]"), ("placement", "0", "(0, 10]"),
    ("placement", "11", "(0, 10]"), ("placement-online", "inf", "[0, 10]"), ("placement-online", "nan", "[0, 10]"),
    ("placement-online", "-1", "[0, 10]")])
def test_cli_refuses_non_finite_or_out_of_range_inflation(inputs: tuple[Path, Path], tmp_path: Path, command: str,
                                                          value: str, bounds: str) -> None:
    # --inflation inf once ran until 18 GB were taken; nan wrote bare NaN into summary.json
    nodes, pods = inputs
    out = tmp_path / "o"
    result = CliRunner().invoke(app, [command, "--nodes", str(nodes), "--trace", str(pods), "--inflation", value,
                                      "--out", str(out)])
    assert result.exit_code == 2
    said = " ".join(result.stderr.replace("│", " ").split())  # typer draws the error in a box
    assert f"--inflation must be a finite number in {bounds}" in said
    assert not out.exists()


def test_cli_unknown_policy(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = inputs
    result = CliRunner().invoke(app, ["placement", "--nodes", str(nodes), "--trace", str(pods),
                                      "--policies", "tetris", "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "unknown policy" in result.output


@pytest.mark.parametrize("text, seeds", [("42-44", [42, 43, 44]), ("42,50", [42, 50]), ("7", [7]),
                                         ("42-43,50", [42, 43, 50])])
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


def test_cli_online_writes_report(tmp_path: Path) -> None:
    from gpuaware.placement import PodRequest
    from gpuaware.sim import TracePod

    write_nodes(tmp_path / "n.csv", synthetic_nodes(10, seed=1))
    pods = [TracePod(PodRequest(f"p{i}", 2000, 100, 1, 500 if i % 2 else 1000, qos="LS" if i % 3 else "BE"),
                     float(i), float(i + 40)) for i in range(120)]
    write_pods(tmp_path / "p.csv", pods)
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["placement-online", "--nodes", str(tmp_path / "n.csv"), "--trace",
                                      str(tmp_path / "p.csv"), "--time-scale", "1", "--inflation", "0",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "online.json").read_text())
    assert set(report["policies"]) == {"FGD", "BestFit", "WasteGradient"}
    for s in report["policies"].values():
        assert s["started"] + s["never_started"] == 120
        assert set(s["queueing_delay_by_qos"]) == {"LS", "BE"}
    assert (out / "online.png").stat().st_size > 1000
