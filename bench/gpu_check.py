"""GPU check: the parts of gpuaware that touch a GPU, run on whatever NVIDIA GPU this machine has.

  probe       NVML opened read-only (gpuaware.gpu.NvmlBackend): each GPU's model, memory, compute capability,
              MIG mode (read with nvmlDeviceGetMigMode, never changed: read again at the end and compared),
              driver and CUDA versions; per metric of the sample contract, what NVML answers on that board
              (gpuaware.gpu.nvml_answers).
  agent       the telemetry agent (gpuaware.services.telemetry.agent.Agent, backend nvml, every GPU at every
              read) publishing for --agent-seconds (60) to a nats-server of its own (gpuaware.devstack);
              what it published is read back from the bus.
  contract    every metric of GpuSampled, per GPU: present (values published), or unsupported with the
              reason (NVML's answer on this board, or NOT_FROM_NVML's); a metric NVML answers but the
              agent never published is missing, and fails the check.
  checkpoint  the checkpoint example's own save and load (libs/checkpoint/examples/train_tiny.py: torch.save
              through write_atomically, fsync'd; torch.load with weights_only) of a model and SGD-momentum
              state of about --checkpoint-gb (1) GB held on CUDA: seconds to save (device -> file) and to
              restore (file -> device). That is what the checkpoint handshake adds to a preemption that
              placement and quota order, beside the binder's default deadline for the answer.
  forecast    the forecast step as served (gpuaware.forecast.Streams over a StreamingModel: onnxruntime,
              CPU provider, the served LSTM's size) for --series (10,000) series, and the same graph on
              onnxruntime's CUDA provider where the installed onnxruntime has one.

Each part runs in a child process of its own with a time limit: an NVML or CUDA call that hangs is
killed and the part reported as timed out. Without an NVIDIA GPU (no NVML library, or NVML sees no GPU)
nothing runs and the result says why; a part that needs what this machine lacks (a CUDA build of torch)
is skipped with the reason.

Run: `make gpu-check` (or `.venv/bin/python bench/gpu_check.py --help`). Writes
bench/results/gpu-check.json (strict JSON, paths relative to the repository). Exits 0 when every part ran
or was skipped with a reason, 1 when one failed or timed out, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from bench_paths import RESULTS_DIR, ROOT, finite, shown
from machine_info import machine

from gpuaware.gpu import (
    NOT_FROM_NVML,
    NVML_QUERIES,
    GpuBackend,
    GpuBackendError,
    GpuBackendUnavailable,
    NvmlBackend,
    nvml_answers,
)
from gpuaware.schemas import METRIC_COLUMNS, GpuSampled, NodeInventory

RESULTS = RESULTS_DIR / "gpu-check.json"
EXAMPLE = ROOT / "libs" / "checkpoint" / "examples" / "train_tiny.py"
PARTS = ("probe", "agent", "checkpoint", "forecast")
NODE = "gpu-check"
CLUSTER = "gpu-check"
GB = 1_000_000_000


# --- probe -----------------------------------------------------------------------------------------------
def probe() -> dict[str, Any]:
    """The GPUs NVML sees, their MIG mode, and NVML's answer per metric; skipped (with why) without any."""
    try:
        backend = NvmlBackend(NODE)
    except GpuBackendUnavailable as exc:
        return {"status": "skipped", "reason": f"no NVIDIA GPU usable on this machine: {exc}"}
    except GpuBackendError as exc:
        return {"status": "failed", "error": f"NVML opened but listing the GPUs failed: {exc}"}
    try:
        inventory = backend.inventory()
        errors = dict(backend.errors)
    finally:
        backend.close()
    if not inventory.gpus:
        return {"status": "skipped", "reason": f"NVML is loaded (driver {inventory.driver_version}) but reports no GPU"}
    return {"status": "ok", **describe(inventory),
            "nvml_answers": {str(g.index): nvml_answers(g.index) for g in inventory.gpus},
            "unexpected_nvml_errors": errors}


def describe(inventory: NodeInventory) -> dict[str, Any]:
    return {"driver_version": inventory.driver_version, "cuda_version": inventory.cuda_version,
            "gpus": [{"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mib": g.memory_mib,
                      "compute_capability": g.compute_capability, "mig_mode": str(g.mig_mode),
                      "mig_instances": [i.profile for i in g.mig_instances],
                      "power_limit_w": g.power_limit_w, "nvlink_links": g.nvlink_links} for g in inventory.gpus]}


# --- the agent against NVML --------------------------------------------------------------------------------
async def observe_agent(nats_url: str, seconds: float,
                        backends: Mapping[str, GpuBackend] | None = None) -> dict[str, Any]:
    """The node agent reading ``backends`` (NVML on this node when None) every second for ``seconds``,
    publishing to ``nats_url``; what it published, read back from the bus, summarised per GPU."""
    from gpuaware import bus
    from gpuaware.schemas import STREAMS
    from gpuaware.services.telemetry.agent import INVENTORY, SAMPLED, Agent, make_backends
    from gpuaware.services.telemetry.settings import AgentSettings

    settings = AgentSettings(nats_url=nats_url, cluster=CLUSTER, backend="nvml", node_name=NODE,
                             allocations="none", fixed_rate=True, log_format="console")
    if backends is None:
        backends, _ = make_backends(settings)
    sampled: list[GpuSampled] = []
    inventories: list[NodeInventory] = []
    undecodable = 0

    def keep(into: list[Any], decode: Callable[[bytes], Any]) -> Callable[[Any], Any]:
        async def cb(msg: Any) -> None:
            nonlocal undecodable
            try:
                into.append(decode(msg.data))
            except Exception:
                undecodable += 1
        return cb

    async with bus.connected(nats_url, name="gpu-check", initial_timeout=10) as nc:
        js = nc.jetstream()
        for spec in STREAMS:
            await bus.ensure_stream(js, spec)
        subs = [await nc.subscribe(SAMPLED.at(CLUSTER, node).subject, cb=keep(sampled, SAMPLED.decode))
                for node in backends]
        subs += [await nc.subscribe(INVENTORY.at(CLUSTER, node).subject, cb=keep(inventories, INVENTORY.decode))
                 for node in backends]
        await nc.flush()
        agent = Agent(settings, js, backends, instance=NODE)
        await agent.start()
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, stop.set)
        started = time.monotonic()
        await agent.run(stop)
        wall = time.monotonic() - started
        errors = {node: dict(getattr(b, "errors", {})) for node, b in backends.items()}
        await agent.stop()
        await nc.flush()
        deadline = time.monotonic() + 30.0  # the last batches are on their way to our subscription
        while len(sampled) < agent.stats.messages and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for sub in subs:
            await sub.unsubscribe()
    stats = agent.stats
    return {"status": "ok" if sampled and not stats.publish_errors else "failed",
            **({} if sampled else {"error": "the agent published no samples"}),
            "seconds": round(wall, 1), "reads": stats.reads, "messages_published": stats.messages,
            "messages_received": len(sampled), "undecodable": undecodable, "publish_errors": stats.publish_errors,
            "read_errors": stats.read_errors, "inventories_received": len(inventories),
            "mig_modes_announced": {g.uuid: str(g.mig_mode) for inv in inventories[-1:] for g in inv.gpus},
            "unexpected_nvml_errors": errors, "observed": summarise(sampled)}


def summarise(batches: Sequence[GpuSampled]) -> dict[str, dict[str, Any]]:
    """Per GPU (uuid): rows published, and per metric the count of values and their range."""
    out: dict[str, dict[str, Any]] = {}
    for batch in batches:
        for row in batch.rows():
            gpu = out.setdefault(row.gpu_uuid, {"rows": 0, "metrics": {}})
            gpu["rows"] += 1
            for column in METRIC_COLUMNS:
                value = getattr(row, column)
                if value is None:
                    continue
                value = float(value)
                m = gpu["metrics"].setdefault(column, {"values": 0, "min": value, "max": value})
                m["values"] += 1
                m["min"], m["max"] = min(m["min"], value), max(m["max"], value)
    return out


def contract(probed: Mapping[str, Any], agent: Mapping[str, Any]) -> dict[str, Any]:
    """Every metric of the sample contract per GPU: present, unsupported (and why) or missing."""
    if probed.get("status") != "ok" or agent.get("status") not in ("ok", "failed") or "observed" not in agent:
        return {"status": "not checked", "reason": "the agent did not run"}
    gpus: dict[str, Any] = {}
    missing: list[str] = []
    for gpu in probed["gpus"]:
        seen = agent["observed"].get(gpu["uuid"], {"rows": 0, "metrics": {}})
        answers = probed["nvml_answers"].get(str(gpu["index"]), {})
        table: dict[str, Any] = {}
        for column in METRIC_COLUMNS:
            if column in seen["metrics"]:
                table[column] = {"status": "present", **seen["metrics"][column]}
            elif column in NOT_FROM_NVML:
                table[column] = {"status": "unsupported", "why": NOT_FROM_NVML[column]}
            elif answers.get(column, "ok") != "ok":
                function = NVML_QUERIES[column][0]
                table[column] = {"status": "unsupported", "why": f"{function} answers {answers[column]} on this board"}
            else:
                function = NVML_QUERIES.get(column, ("no NVML query",))[0]
                table[column] = {"status": "missing", "why": f"NVML answers {function} but the agent published "
                                                             f"no value in {seen['rows']} rows"}
                missing.append(f"GPU {gpu['index']} {column}")
        gpus[str(gpu["index"])] = {"uuid": gpu["uuid"], "rows": seen["rows"], "metrics": table}
    return {"status": "failed" if missing else "ok", "missing": missing, "gpus": gpus}


# --- checkpoint save and restore on CUDA -------------------------------------------------------------------
def load_example() -> ModuleType:
    """libs/checkpoint/examples/train_tiny.py, imported by path (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("gpuaware_train_tiny", EXAMPLE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import {shown(EXAMPLE)}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def checkpoint_times(device: str, target_bytes: int, repeats: int, directory: Path) -> dict[str, Any]:
    """Save and restore, through the example's ``save`` / ``load``, a stack of linear layers and their
    SGD momentum (the example's optimiser) of about ``target_bytes`` on ``device``."""
    import torch

    from gpuaware.checkpoint import Progress

    example = load_example()
    width = 4096 if target_bytes >= 8 * 4096 * 4097 else max(16, int((target_bytes / 8) ** 0.5))
    layers = max(1, round(target_bytes / (8 * width * (width + 1))))  # fp32 weights + momentum

    def built() -> tuple[Any, Any]:
        model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers))).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    torch.manual_seed(0)
    model, opt = built()
    model(torch.randn(8, width, device=device)).square().mean().backward()
    opt.step()  # the optimiser now holds its momentum buffers, as a checkpoint taken mid-training does
    tensors = [*model.state_dict().values(),
               *(t for s in opt.state_dict()["state"].values() for t in s.values() if torch.is_tensor(t))]
    state_bytes = sum(t.numel() * t.element_size() for t in tensors)
    progress = Progress(global_batch=64)
    path = directory / "gpu-check.pt"
    saves, restores, equal = [], [], True
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        example.save(path, model, opt, progress, example.World())
        saves.append(time.perf_counter() - t0)
        again, again_opt = built()  # allocated before the clock starts: restoring fills existing memory
        sync()
        t0 = time.perf_counter()
        example.load(path, again, again_opt)
        sync()
        restores.append(time.perf_counter() - t0)
        first, last = next(iter(model.state_dict())), list(model.state_dict())[-1]
        equal &= all(torch.equal(model.state_dict()[k], again.state_dict()[k]) for k in (first, last))
        del again, again_opt
    size = path.stat().st_size
    return {"status": "ok" if equal else "failed", **({} if equal else {"error": "the restored state differs"}),
            "device": device, "example": shown(EXAMPLE), "layers": layers, "width": width,
            "state_bytes": state_bytes, "file_bytes": size, "repeats": repeats,
            "save_s": [round(s, 4) for s in saves], "restore_s": [round(s, 4) for s in restores],
            "save_s_median": round(statistics.median(saves), 4),
            "restore_s_median": round(statistics.median(restores), 4),
            "save_gb_per_s": round(size / GB / statistics.median(saves), 3),
            "restore_gb_per_s": round(size / GB / statistics.median(restores), 3),
            "restored_equal": equal,
            "note": "save: device -> file, flushed and fsync'd (write_atomically); restore: torch.load onto "
                    "the device the state was saved from + load_state_dict, from the page cache (the file was "
                    "just written; a restore on another node reads its storage first)"}


def checkpoint_part(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        why = ("this torch is a CPU build (torch.version.cuda is None): install the CUDA wheel"
               if torch.version.cuda is None else
               f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable CUDA device")
        return {"status": "skipped", "reason": why}
    with tempfile.TemporaryDirectory(prefix="gpuaware-gpu-check-") as tmp:
        out = checkpoint_times("cuda", int(args.checkpoint_gb * GB), args.repeats, Path(tmp))
    out |= {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cuda_device": torch.cuda.get_device_name(0), "binder_checkpoint_deadline_s": binder_deadline_s()}
    return out


def binder_deadline_s() -> float | None:
    """How long the binder waits for a victim's checkpoint by default (its settings' default)."""
    import msgspec

    from gpuaware.services.binder.settings import BinderSettings

    for f in msgspec.structs.fields(BinderSettings):
        if f.name == "checkpoint_deadline_s":
            return float(f.default)
    return None


# --- the forecast step ----------------------------------------------------------------------------------
def forecast_model(work: Path, train_iters: int) -> bytes:
    """The served LSTM's configuration (config_for: 2 x 64), trained ``train_iters`` iterations on three
    days of a synthetic demand curve written as a Helios VC file: a real model file for timing the
    step (its accuracy is bench-forecast's business)."""
    from gpuaware.forecast import config_for, fit, prepare

    minutes = np.arange(3 * 24 * 60)
    rng = np.random.default_rng(0)
    demand = np.maximum(0, 40 + 25 * np.sin(2 * np.pi * minutes / 1440) + rng.normal(0, 4, minutes.size)).round()
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    path = work / "check_cluster_sequence_vc.csv"
    with path.open("w") as f:
        f.write("time,running_gpu_num,pending_gpu_num\n")
        for m, d in zip(minutes, demand, strict=True):
            f.write(f"{datetime.fromtimestamp(start + 60 * int(m), UTC).isoformat()},{int(d)},0\n")
    prepared = prepare([path], "helios", test_days=1.0)
    _, blob = fit(prepared, config_for(60.0, max_iters=train_iters, max_seconds=120.0, eval_every=max(1, train_iters)))
    return blob


def step_times(series: int, steps: int, blob: bytes) -> dict[str, Any]:
    """``Streams.step`` (the served path, CPU provider) over ``series`` series; the graph alone on CUDA."""
    import onnxruntime as ort

    from gpuaware.forecast import StreamingModel, Streams

    model = StreamingModel.load(blob)
    streams = Streams(model, series)
    rng = np.random.default_rng(1)
    t = datetime(2026, 1, 4, tzinfo=UTC).timestamp()
    for _ in range(3):  # warm up: the first runs allocate
        streams.step(rng.uniform(0, 8, series), t)
        t += model.features.step_s
    served: list[float] = []
    for _ in range(steps):
        values = rng.uniform(0, 8, series)
        t0 = time.perf_counter()
        streams.step(values, t)
        served.append(time.perf_counter() - t0)
        t += model.features.step_s
    out: dict[str, Any] = {"status": "ok", "series": series, "steps": steps, "onnxruntime": ort.__version__,
                           "served_cpu": timing(served), "providers_available": ort.get_available_providers()}
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        out["cuda"] = {"status": "skipped",
                       "reason": f"onnxruntime {ort.__version__} as installed has no CUDAExecutionProvider (the "
                                 "pinned wheel is the CPU build; the forecasting service serves on CPU)"}
        return out
    session = ort.InferenceSession(bytes(blob), providers=["CUDAExecutionProvider"])
    used = session.get_providers()
    x = rng.standard_normal((series, len(model.meta["features"]))).astype(np.float32)
    h = np.zeros((model.layers, series, model.hidden), dtype=np.float32)
    graph: list[float] = []
    for k in range(3 + steps):
        t0 = time.perf_counter()
        session.run(None, {"x": x, "h": h, "c": h})
        if k >= 3:
            graph.append(time.perf_counter() - t0)
    cpu: list[float] = []
    for k in range(3 + steps):
        t0 = time.perf_counter()
        model.session.run(None, {"x": x, "h": h, "c": h})
        if k >= 3:
            cpu.append(time.perf_counter() - t0)
    out["cuda"] = {"status": "ok" if used and used[0] == "CUDAExecutionProvider" else "failed",
                   "providers_used": used, "graph_cuda": timing(graph), "graph_cpu": timing(cpu)}
    return out


def timing(seconds: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "max_ms": round(float(ms.max()), 3)}


def forecast_part(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuaware-gpu-check-") as tmp:
        blob = forecast_model(Path(tmp), args.forecast_train_iters)
    return step_times(args.series, args.forecast_steps, blob)


# --- one part in a child process ------------------------------------------------------------------------
def run_part_here(part: str, args: argparse.Namespace) -> dict[str, Any]:
    """The part itself (the child process's work)."""
    if part == "probe":
        return probe()
    if part == "checkpoint":
        return checkpoint_part(args)
    if part == "forecast":
        return forecast_part(args)
    from gpuaware.devstack import start_nats

    with tempfile.TemporaryDirectory(prefix="gpuaware-gpu-check-") as tmp:
        nats = start_nats(Path(tmp) / "nats")
        try:
            return asyncio.run(observe_agent(nats.url, args.agent_seconds))
        finally:
            nats.stop()


def run_part(part: str, args: argparse.Namespace, limit_s: float) -> dict[str, Any]:
    """``part`` in a child process (its own session, so a hung NVML/CUDA call dies with everything it
    started), killed after ``limit_s``; its result, or why there is none."""
    with tempfile.TemporaryDirectory(prefix="gpuaware-gpu-check-") as tmp:
        out, log = Path(tmp) / "part.json", Path(tmp) / "part.log"
        argv = [sys.executable, str(Path(__file__).resolve()), "--part", part, "--part-out", str(out),
                *forwarded(args)]
        started = time.monotonic()
        with log.open("wb") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
            try:
                rc = proc.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return {"status": "timed_out", "limit_s": limit_s, "log_tail": tail(log)}
        wall = round(time.monotonic() - started, 1)
        if out.exists():
            try:
                return dict(json.loads(out.read_text())) | {"part_wall_s": wall}
            except json.JSONDecodeError as exc:
                return {"status": "failed", "error": f"unreadable result ({exc})", "log_tail": tail(log)}
        return {"status": "failed", "error": f"the part exited with {rc} and no result", "log_tail": tail(log)}


def tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def forwarded(args: argparse.Namespace) -> list[str]:
    return ["--agent-seconds", str(args.agent_seconds), "--checkpoint-gb", str(args.checkpoint_gb),
            "--repeats", str(args.repeats), "--series", str(args.series), "--forecast-steps",
            str(args.forecast_steps), "--forecast-train-iters", str(args.forecast_train_iters)]


# --- the whole check --------------------------------------------------------------------------------------
def limits(args: argparse.Namespace) -> dict[str, float]:
    return {"probe": 120.0, "agent": args.agent_seconds + 120.0, "checkpoint": 120.0 + 60.0 * args.repeats
            * max(1.0, args.checkpoint_gb), "forecast": 600.0}


def check(args: argparse.Namespace,
          run: Callable[[str, argparse.Namespace, float], dict[str, Any]] = run_part) -> dict[str, Any]:
    """The report: the probe first; without a GPU it says why and nothing else runs."""
    report: dict[str, Any] = {"check": "gpu: telemetry agent on NVML, checkpoint on CUDA, forecast step",
                              "when": datetime.now(UTC).isoformat(timespec="seconds"),
                              "machine": machine("nvidia-ml-py", "torch", "onnxruntime"),
                              "parameters": {k: v for k, v in vars(args).items() if k not in ("part", "part_out")}
                              | {"out": shown(Path(args.out))}}
    lim = limits(args)
    first = run("probe", args, lim["probe"])
    report["probe"] = first
    if first.get("status") != "ok":
        skipped = first.get("status") == "skipped"
        report |= {"status": "skipped" if skipped else "failed",
                   "reason": first.get("reason") or first.get("error") or first.get("status")}
        return report
    for part in PARTS[1:]:
        report[part] = run(part, args, lim[part])
    report["contract"] = contract(first, report["agent"])
    after = run("probe", args, lim["probe"])
    before_modes = {g["uuid"]: g["mig_mode"] for g in first["gpus"]}
    after_modes = {g["uuid"]: g["mig_mode"] for g in after.get("gpus", [])}
    report["mig"] = {"modes": before_modes,
                     "unchanged": after_modes == before_modes if after.get("status") == "ok" else None,
                     "read_again_at_the_end": after_modes if after.get("status") == "ok" else after}
    parts = [report[p].get("status") for p in PARTS[1:]] + [report["contract"]["status"]]
    bad = [p for p, s in zip((*PARTS[1:], "contract"), parts, strict=True) if s not in ("ok", "skipped")]
    if report["mig"]["unchanged"] is not True:
        bad.append("mig" if report["mig"]["unchanged"] is False else "mig (not read again)")
    report["status"] = "failed" if bad else "ok"
    if bad:
        report["reason"] = f"not ok: {', '.join(bad)}"
    return report


def write(report: Mapping[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(finite(dict(report)), indent=2, allow_nan=False) + "\n")


def show(report: Mapping[str, Any], out: Path) -> None:
    print(f"gpu check: {report['status']}" + (f" ({report['reason']})" if report.get("reason") else ""))
    for part in PARTS[1:]:
        r = report.get(part)
        if r is not None:
            print(f"  {part}: {r.get('status')}" + (f" ({r.get('reason') or r.get('error')})"
                                                    if r.get("reason") or r.get("error") else ""))
    if "contract" in report:
        print(f"  metric contract: {report['contract']['status']}")
    ck = report.get("checkpoint", {})
    if ck.get("status") == "ok":
        print(f"  checkpoint of {ck['state_bytes'] / GB:.2f} GB: save {ck['save_s_median']} s, "
              f"restore {ck['restore_s_median']} s (median of {ck['repeats']})")
    print(f"wrote {shown(out)}")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS), help="where the JSON result goes (default: %(default)s)")
    ap.add_argument("--agent-seconds", type=float, default=60.0, help="how long the agent runs on NVML")
    ap.add_argument("--checkpoint-gb", type=float, default=1.0, help="model + optimiser state to save, in GB")
    ap.add_argument("--repeats", type=int, default=3, help="saves and restores timed")
    ap.add_argument("--series", type=int, default=10_000, help="series stepped at once by the forecast step")
    ap.add_argument("--forecast-steps", type=int, default=50, help="forecast steps timed")
    ap.add_argument("--forecast-train-iters", type=int, default=20,
                    help="training iterations of the model whose step is timed")
    ap.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    ap.add_argument("--part-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name in ("agent_seconds", "checkpoint_gb", "repeats", "series", "forecast_steps", "forecast_train_iters"):
        if not getattr(args, name) > 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.part:  # a child process: one part, its result to --part-out
        try:
            result = run_part_here(args.part, args)
        except Exception as exc:
            result = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc()[-3000:]}
        Path(args.part_out).write_text(json.dumps(finite(result), allow_nan=False))
        return 0
    out = Path(args.out).resolve()
    report = check(args)
    write(report, out)
    show(report, out)
    return 1 if report["status"] == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
