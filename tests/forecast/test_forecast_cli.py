"""`gpuaware forecast train|evaluate`: the contract other tools call (summary.json's shape), bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from gpuaware.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def helios_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight days of a Helios-format VC: a daily demand wave, a duplicated minute and a missing one."""
    rng = np.random.default_rng(0)
    t = pd.date_range("2020-05-01", periods=8 * 1440, freq="min")
    wave = 40 + 20 * np.sin(2 * np.pi * np.arange(len(t)) / 1440)
    running = np.round(wave + rng.normal(0, 2, len(t))).clip(0)
    frame = pd.DataFrame({"time": t.strftime("%Y-%m-%d %H:%M:%S"), "running_gpu_num": running,
                          "pending_gpu_num": (rng.random(len(t)) < 0.1) * 4})
    frame = pd.concat([frame.iloc[:100], frame.iloc[99:100], frame.iloc[101:]])  # a duplicate, a gap
    path = tmp_path_factory.mktemp("helios") / "vcTest_cluster_sequence_vc.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def model_file(helios_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "m.onnx"
    res = runner.invoke(app, ["forecast", "train", "--series", str(helios_file), "--format", "helios",
                              "--test-days", "2", "--horizons", "10,30,60", "--iters", "20", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_evaluate_with_a_model_writes_the_summary_contract(helios_file: Path, model_file: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["forecast", "evaluate", "--series", str(helios_file), "--format", "helios",
                              "--test-days", "2", "--horizons", "10,30,60", "--model", str(model_file),
                              "--out", str(tmp_path), "--plot"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["series"] == ["vcTest"]
    assert set(summary["models"]) == {"persistence", "seasonal_naive_1d", "ewma", "ets", "ridge", "lstm", "served"}
    for m in summary["models"].values():
        assert set(m) == {"rmse_at", "smape_at", "coverage_at"}
        assert set(m["rmse_at"]) == set(m["smape_at"]) == {"10", "30", "60"}
        assert all(np.isfinite(v) for v in m["rmse_at"].values())
        assert set(m["coverage_at"]) == {"p90", "p10_p90"}
        assert all(0.0 <= v <= 1.0 for c in m["coverage_at"].values() for v in c.values())
    # the served forecast names what served each horizon, and is that model's (or two models' mean)
    served = summary["served"]["vcTest"]
    assert set(served) == {"10", "30", "60"}
    for h, name in served.items():
        parts = name.split("+")
        assert set(parts) <= set(summary["models"]) - {"served"}
        if len(parts) == 1:
            assert summary["models"]["served"]["rmse_at"][h] == summary["models"][name]["rmse_at"][h]
    # the daily wave: yesterday's value is a far better 60-min forecast than persistence
    assert summary["models"]["seasonal_naive_1d"]["rmse_at"]["60"] < summary["models"]["persistence"]["rmse_at"]["60"]
    detail = json.loads((tmp_path / "detail.json").read_text())
    assert any("duplicate" in n for n in detail["series"][0]["notes"])
    why = detail["series"][0]["served"]["60"]
    assert why["model"] == served["60"] and set(why["validation_rmse"]) == set(summary["models"]) - {"served"}
    assert set(why["selection_rmse"]) == set(why["validation_rmse"])
    assert (tmp_path / "vcTest.png").stat().st_size > 1000


@pytest.mark.parametrize("args, message", [
    (["--format", "nope"], "unknown format"),
    (["--format", "helios", "--test-days", "30"], "cannot hold"),
    (["--format", "helios", "--split", "philly"], "published split"),
    (["--format", "helios", "--horizons", "ten"], "horizons must look like"),
])
def test_bad_input_is_a_clear_error(helios_file: Path, tmp_path: Path, args: list[str], message: str) -> None:
    res = runner.invoke(app, ["forecast", "evaluate", "--series", str(helios_file), *args, "--out", str(tmp_path),
                              "--model", "x.onnx"])
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())


def test_a_corrupt_model_file_is_refused_with_the_reason(helios_file: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model at all")
    res = runner.invoke(app, ["forecast", "evaluate", "--series", str(helios_file), "--format", "helios",
                              "--test-days", "2", "--model", str(bad), "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "unusable model" in res.output and "onnxruntime cannot load" in " ".join(res.output.split())


def test_a_model_of_other_horizons_is_refused(helios_file: Path, model_file: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["forecast", "evaluate", "--series", str(helios_file), "--format", "helios",
                              "--test-days", "2", "--horizons", "15", "--model", str(model_file), "--out", str(tmp_path)])
    assert res.exit_code == 2 and "not [15] min" in " ".join(res.output.split())


def test_model_latest_reads_the_registry(helios_file: Path, model_file: Path, tmp_path: Path,
                                         fresh_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuaware import tsdb
    from gpuaware.forecast import registry

    asyncio.run(tsdb.migrate(fresh_database_url))
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    args = ["forecast", "evaluate", "--series", str(helios_file), "--format", "helios", "--test-days", "2",
            "--horizons", "10,30,60",
            "--model", "latest", "--out", str(tmp_path)]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "registry is empty" in res.output
    async def publish() -> tuple[int, registry.RegistryEntry | None]:
        async with await tsdb.connect(fresh_database_url) as conn:
            return (await registry.publish_async(conn, "vcTest", model_file.read_bytes()),
                    await registry.latest_async(conn))

    version, entry = asyncio.run(publish())
    assert entry is not None and entry.version == version and entry.onnx == model_file.read_bytes()  # the round trip
    assert entry.data_window["train_from"].startswith("2020-05-01")
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    detail = json.loads((tmp_path / "detail.json").read_text())
    assert detail["model"] == f"registry vcTest@{version}"
