"""`make gpu-check` (bench/gpu_check.py) where there is no GPU, and on a fake NVML.

Without a GPU the check skips, says why, writes strict JSON with paths relative to the repository and
exits 0. On a fake NVML (gpu_fakes: the real pynvml structures and error classes) the real agent publishes
to a real nats-server and the report sorts every metric of the contract into present, unsupported (with
NVML's answer) or missing; the checkpoint and forecast parts run on the CPU at a small size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest
from gpu_fakes import FakeGpu, FakeNvml

from gpuaware.gpu import NOT_FROM_NVML, NVML_QUERIES, NvmlBackend, nvml_answers
from gpuaware.schemas import METRIC_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "bench"))  # after every package: bench has bus.py, health.py

import gpu_check  # noqa: E402  # a script beside the packages, imported by path


def strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def args_for(out: Path, **overrides: Any) -> argparse.Namespace:
    return gpu_check.parse(["--out", str(out), *[f"--{k.replace('_', '-')}={v}" for k, v in overrides.items()]])


def nvml_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def in_process(part: str, args: argparse.Namespace, limit_s: float) -> dict[str, Any]:
    return gpu_check.run_part_here(part, args)


def test_without_nvml_the_check_skips_says_why_and_writes_strict_portable_json(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_library() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    out = tmp_path / "gpu-check.json"
    report = gpu_check.check(args_for(out), run=in_process)
    gpu_check.write(report, out)
    text = out.read_text()
    written = strict(text)
    assert written["status"] == "skipped"
    assert "NVMLError_LibraryNotFound" in written["reason"] and "no NVIDIA GPU" in written["reason"]
    assert set(written) >= {"when", "machine", "parameters", "probe"}
    assert not set(written) & {"agent", "checkpoint", "forecast", "contract"}  # nothing ran
    assert str(tmp_path) not in text and str(ROOT) not in text
    assert written["parameters"]["out"] == "gpu-check.json"


@pytest.mark.skipif(nvml_present(), reason="this machine has NVML: `make gpu-check` would run the real check")
def test_make_gpu_check_without_a_gpu_exits_0_with_the_reason(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    written = strict(out.read_text())
    assert written["status"] == "skipped" and written["reason"]
    assert written["probe"]["status"] == "skipped"
    assert "gpu check: skipped" in proc.stdout


def test_bad_arguments_are_refused_without_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--agent-seconds", "0",
                           "--out", str(tmp_path / "x.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--agent-seconds must be positive" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_every_metric_of_the_contract_has_an_nvml_query_or_a_reason_and_every_query_only_reads() -> None:
    assert set(NVML_QUERIES) | set(NOT_FROM_NVML) == set(METRIC_COLUMNS)
    assert not set(NVML_QUERIES) & set(NOT_FROM_NVML)
    for function, args in NVML_QUERIES.values():
        assert function.startswith("nvmlDeviceGet") and hasattr(pynvml, function)
        assert all(a.isdigit() or hasattr(pynvml, a) for a in args)
    source = (ROOT / "bench" / "gpu_check.py").read_text()
    assert "nvmlDeviceSet" not in source and "pynvml" not in source  # NVML only through gpuaware.gpu


def h100(**kw: Any) -> FakeGpu:
    return FakeGpu(uuid="GPU-h100-0", name="NVIDIA H100 80GB HBM3", util=(37, 12), power_mw=120_500,
                   retired=None, **kw)


def test_nvml_answers_name_the_error_of_each_unsupported_query(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml(monkeypatch, [h100(ecc=None, mem_temp_c=None, pcie_replay=None)])
    answers = nvml_answers(0)
    assert set(answers) == set(NVML_QUERIES)
    unsupported = {c for c, a in answers.items() if a != "ok"}
    assert unsupported == {"retired_pages", "mem_temperature_c", "pcie_replay", "nvlink_up",
                           *(c for c in METRIC_COLUMNS if c.startswith("ecc_"))}
    assert answers["retired_pages"] == "NVMLError_NotSupported"
    assert answers["util_pct"] == answers["power_w"] == "ok"


async def test_the_agent_on_a_fake_nvml_and_the_metric_contract(monkeypatch: pytest.MonkeyPatch,
                                                                  nats_url: str) -> None:
    mig_like = FakeGpu(uuid="GPU-h100-1", name="NVIDIA H100 80GB HBM3", bus_id="00000000:0F:00.0", util=None,
                       retired=None, mig_mode=(1, 1))
    FakeNvml(monkeypatch, [h100(), mig_like])
    probed = gpu_check.probe()
    assert probed["status"] == "ok"
    assert [g["mig_mode"] for g in probed["gpus"]] == ["disabled", "enabled"]
    agent = await gpu_check.observe_agent(nats_url, 2.5, backends={gpu_check.NODE: NvmlBackend(gpu_check.NODE)})
    assert agent["status"] == "ok", agent
    assert agent["messages_received"] == agent["messages_published"] >= 2
    assert agent["inventories_received"] >= 1
    table = gpu_check.contract(probed, agent)
    assert table["status"] == "ok", table["missing"]
    first, second = table["gpus"]["0"]["metrics"], table["gpus"]["1"]["metrics"]
    assert set(first) == set(METRIC_COLUMNS)
    # utilisation 37 % and power 120.5 W as the fake reports them, through the agent and the bus
    assert first["util_pct"] | {"values": 0} == {"status": "present", "values": 0, "min": 37.0, "max": 37.0}
    assert first["power_w"]["min"] == 120.5
    assert second["util_pct"] == {"status": "unsupported",
                                  "why": "nvmlDeviceGetUtilizationRates answers NVMLError_NotSupported on this board"}
    assert first["retired_pages"]["status"] == "unsupported"
    assert "DCGM" in first["tensor_active_pct"]["why"]
    # a metric NVML answers that the agent did not publish fails the check, by name
    agent["observed"]["GPU-h100-0"]["metrics"].pop("power_w")
    broken = gpu_check.contract(probed, agent)
    assert broken["status"] == "failed" and broken["missing"] == ["GPU 0 power_w"]
    assert broken["gpus"]["0"]["metrics"]["power_w"]["status"] == "missing"


def test_the_report_of_a_gpu_machine_and_a_mig_mode_that_changed(tmp_path: Path) -> None:
    gpus = [{"index": 0, "uuid": "GPU-a", "mig_mode": "disabled"}]
    probed = {"status": "ok", "gpus": gpus, "nvml_answers": {"0": {c: "ok" for c in NVML_QUERIES}}}
    observed = {"GPU-a": {"rows": 60, "metrics": {c: {"values": 60, "min": 1.0, "max": 2.0} for c in NVML_QUERIES}}}
    results = {"agent": {"status": "ok", "observed": observed},
               "checkpoint": {"status": "skipped", "reason": "this torch is a CPU build"},
               "forecast": {"status": "ok"}}
    probes = [probed, probed]

    def run(part: str, args: argparse.Namespace, limit_s: float) -> dict[str, Any]:
        assert limit_s > 0
        return probes.pop(0) if part == "probe" else results[part]

    report = gpu_check.check(args_for(tmp_path / "r.json"), run=run)
    assert report["status"] == "ok" and report["contract"]["status"] == "ok"
    assert report["mig"]["unchanged"] is True
    changed = {**probed, "gpus": [{**gpus[0], "mig_mode": "enabled"}]}
    probes[:] = [probed, changed]
    report = gpu_check.check(args_for(tmp_path / "r.json"), run=run)
    assert report["status"] == "failed" and report["reason"] == "not ok: mig"
    probes[:] = [probed, {"status": "timed_out", "limit_s": 120.0}]
    report = gpu_check.check(args_for(tmp_path / "r.json"), run=run)
    assert report["mig"]["unchanged"] is None and report["reason"] == "not ok: mig (not read again)"


def test_a_part_that_hangs_is_killed_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_check, "__file__", str(tmp_path / "hang.py"))
    (tmp_path / "hang.py").write_text("import time\ntime.sleep(600)\n")
    result = gpu_check.run_part("probe", args_for(tmp_path / "r.json"), limit_s=1.0)
    assert result["status"] == "timed_out" and result["limit_s"] == 1.0


def test_checkpoint_save_and_restore_through_the_example(tmp_path: Path) -> None:
    result = gpu_check.checkpoint_times("cpu", 2_000_000, 2, tmp_path)
    assert result["status"] == "ok" and result["restored_equal"] is True
    assert result["example"] == "libs/checkpoint/examples/train_tiny.py"
    assert 1_000_000 < result["state_bytes"] < 4_000_000  # weights and momentum, about the size asked
    assert result["file_bytes"] >= result["state_bytes"]
    assert len(result["save_s"]) == len(result["restore_s"]) == 2


@pytest.mark.slow
def test_the_forecast_step_as_served(tmp_path: Path) -> None:
    blob = gpu_check.forecast_model(tmp_path, train_iters=1)
    result = gpu_check.step_times(20, 2, blob)
    assert result["status"] == "ok" and result["series"] == 20
    assert result["served_cpu"]["p50_ms"] > 0
    if "CUDAExecutionProvider" in result["providers_available"]:
        assert result["cuda"]["status"] == "ok"
    else:
        assert result["cuda"]["status"] == "skipped" and "CUDAExecutionProvider" in result["cuda"]["reason"]
