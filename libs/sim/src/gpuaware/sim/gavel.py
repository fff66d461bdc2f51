"""Gavel's throughput matrices and a heterogeneity evaluation for the `throughput` plugin.

Gavel (OSDI'20) publishes each job type's isolated throughput on V100, P100 and K80 GPUs. We map
those worker types onto our GPU models (v100 -> V100M16 and V100M32, p100 -> P100, k80 -> K80) and
use the one-GPU (scale factor 1) rate as a per-GPU rate for every job of that type.

The evaluation is Gavel's heterogeneous setting: equal numbers of V100, P100 and K80 GPUs, jobs drawn
the way Gavel's generator draws them (job type uniform over the 26 templates; 1, 2, 4 or 8 GPUs with
probability 0.70 / 0.10 / 0.15 / 0.05) on 304 GPUs of each model in 8-GPU nodes, arriving until `load` x the GPU capacity is asked, never
leaving. Reported per profile: GPU allocation and the GPU-weighted mean *normalised throughput* of
placed jobs (throughput on the GPU model received / best over the models), 1.0 being every job on its
best model.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpuaware.placement import (
    Cluster,
    Framework,
    NodeSpec,
    Placed,
    PodRequest,
    Session,
    TypicalPods,
    build_scheduler,
)

GAVEL_MODELS: dict[str, tuple[str, ...]] = {"v100": ("V100M16", "V100M32"), "p100": ("P100",), "k80": ("K80",)}


def load_gavel_throughputs(path: Path | str, scale_factor: int = 1) -> dict[str, dict[str, float]]:
    """{job type: {GPU model: isolated throughput}} from a Gavel *_throughputs.json file."""
    raw = json.loads(Path(path).read_text())
    out: dict[str, dict[str, float]] = {}
    for worker, models in GAVEL_MODELS.items():
        for key, value in raw.get(worker, {}).items():
            job, sf = ast.literal_eval(key)
            if sf != scale_factor:
                continue
            for m in models:
                out.setdefault(job, {})[m] = float(value["null"])
    if not out:
        raise ValueError(f"{path}: no throughputs for scale factor {scale_factor}")
    return out


def gavel_jobs(count: int, job_types: Sequence[str], seed: int) -> list[PodRequest]:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 4, 8], size=count, p=[0.70, 0.10, 0.15, 0.05])
    kinds = rng.integers(len(job_types), size=count)
    return [PodRequest(f"job-{i:05d}", 4000 * int(k), 16_384 * int(k), int(k), 1000, job_type=job_types[j])
            for i, (k, j) in enumerate(zip(sizes, kinds, strict=True))]


def hetero_cluster(gpus_per_model: int = 304, gpus_per_node: int = 8) -> list[NodeSpec]:
    nodes = []
    for model in ("V100M32", "P100", "K80"):
        for i in range(gpus_per_model // gpus_per_node):
            nodes.append(NodeSpec(f"{model.lower()}-{i:03d}", 32_000 * gpus_per_node // 4, 262_144, gpus_per_node, model))
    return nodes


def evaluate_heterogeneity(
    matrix: Mapping[str, Mapping[str, float]],
    profiles: Mapping[str, Mapping[str, Any]],
    load: float = 0.9,
    seeds: Sequence[int] = (42, 43, 44),
) -> dict[str, dict[str, float]]:
    """Mean over seeds of allocation % and normalised throughput, per profile (see module doc)."""
    nodes = hetero_cluster()
    jobs_all = {s: gavel_jobs(4000, sorted(matrix), s) for s in seeds}
    out: dict[str, dict[str, float]] = {}
    for name, profile in profiles.items():
        allocs, norms = [], []
        for seed in seeds:
            cluster = Cluster(nodes)
            jobs = jobs_all[seed]
            session = Session(cluster, Framework.of(build_scheduler(
                profile, typical=TypicalPods.from_requests(jobs), seed=seed,
                tie_rank=np.random.default_rng(seed).permutation(len(nodes)), name=name)), actions=("allocate",))
            asked, got, weight = 0, 0.0, 0
            for job in jobs:
                asked += job.total_gpu_milli
                if asked > load * cluster.total_gpu_milli:
                    break
                (result,) = session.run([job])
                if isinstance(result, Placed):
                    d = result.decision
                    rates = matrix[job.job_type]
                    got += job.num_gpu * rates.get(cluster.specs[d.node].gpu_model, 0.0) / max(rates.values())
                    weight += job.num_gpu
            allocs.append(100.0 * cluster.used_gpu_milli / cluster.total_gpu_milli)
            norms.append(got / max(weight, 1))
        out[name] = {"alloc_pct": round(float(np.mean(allocs)), 3),
                     "normalized_throughput": round(float(np.mean(norms)), 4)}
    return out


def default_profiles(matrix: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, Any]]:
    tp = {"name": "throughput", "weight": 1000, "args": {"matrix": matrix}}
    return {
        "BestFit": {"score": [{"name": "bestfit", "weight": 1000}], "gpu": "best"},
        "BestFit+Throughput": {"score": [{"name": "bestfit", "weight": 1000}, tp], "gpu": "best"},
        "WasteGradient": {"score": [{"name": "waste-gradient", "weight": 1000}], "gpu": "waste-gradient"},
        "WasteGradient+Throughput": {"score": [{"name": "waste-gradient", "weight": 1000}, tp],
                                     "gpu": "waste-gradient"},
    }
