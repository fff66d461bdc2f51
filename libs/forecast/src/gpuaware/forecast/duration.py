"""How long will this job run? A predictor for recurring jobs, for quota's backfill of short work.

Fingerprint: what stays the same when a job recurs — its name with run-specific tokens (digits,
hex ids, dates) masked, its tenant (or user), its image, its GPU count. Any part may be unknown ('').

Prediction, in log-seconds (durations span six orders of magnitude; errors are multiplicative):

* a fingerprint seen ``n`` times: the mean of its log-durations, shrunk toward the tenant's prior with
  the weight of ``prior_weight`` pseudo-observations: ``(n * mean + k * prior) / (n + k)``. One run
  already moves the estimate halfway (k = 1); it converges to the fingerprint's own typical runtime.
* a novel fingerprint: conservative — the ``novel_quantile`` (default p75) of the tenant's observed
  durations (the cluster's when the tenant is new too; ``default_s`` when nothing was observed),
  so backfill does not squeeze a job it knows nothing about into a short gap.

The evaluation (``evaluate_philly``) replays the Philly job list in time order: a job's runtime is
observed when it finishes (submit + duration), never earlier, and the jobs submitted after
``split`` are scored: median absolute error on recurring jobs (fingerprint seen before) next to "the
mean of the tenant's past jobs". The Pollux copy of the trace has no user, job name or image
columns: its tenant is the virtual cluster and its fingerprint (VC, GPU count), stated in the output.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["DurationPredictor", "Fingerprint", "evaluate_philly", "fingerprint"]

_RUN_TOKENS = re.compile(r"([0-9a-f]{8,}|\d+)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    name: str
    tenant: str
    image: str
    gpus: int


def fingerprint(name: str = "", tenant: str = "", image: str = "", gpus: int = 0) -> Fingerprint:
    """``train-resnet50-run17-2017-10-03`` and ``train-resnet50-run18-2017-10-04`` share one fingerprint."""
    return Fingerprint(_RUN_TOKENS.sub("#", name.lower()), tenant, image.split("@")[0], int(gpus))


class DurationPredictor:
    def __init__(self, prior_weight: float = 1.0, novel_quantile: float = 0.75, default_s: float = 3600.0,
                 keep: int = 1000):
        self.k = prior_weight
        self.q = novel_quantile
        self.default_s = default_s
        self.keep = keep
        self.by_fp: dict[Fingerprint, list[float]] = defaultdict(lambda: [0, 0.0])  # n, sum of logs
        self.by_tenant: dict[str, list[float]] = defaultdict(list)  # recent log-durations
        self.everything: list[float] = []

    def observe(self, fp: Fingerprint, duration_s: float) -> None:
        """A finished run of ``fp`` took ``duration_s`` (a non-positive or non-finite duration is ignored)."""
        if not (duration_s > 0 and math.isfinite(duration_s)):
            return
        x = math.log(duration_s)
        acc = self.by_fp[fp]
        acc[0] += 1
        acc[1] += x
        for pool in (self.by_tenant[fp.tenant], self.everything):
            pool.append(x)
            if len(pool) > self.keep:
                del pool[: len(pool) - self.keep]

    def _prior(self, tenant: str) -> float | None:
        pool = self.by_tenant.get(tenant) or self.everything
        return float(np.quantile(pool, self.q)) if pool else None

    def predict(self, fp: Fingerprint) -> tuple[float, str]:
        """(seconds, how): ``recurring (n runs)``, ``novel: tenant p75`` / ``novel: cluster p75`` / ``default``."""
        prior = self._prior(fp.tenant)
        acc = self.by_fp.get(fp)
        if acc is not None and acc[0] > 0:
            n, s = acc
            base = prior if prior is not None else s / n
            return math.exp((s + self.k * base) / (n + self.k)), f"recurring ({int(n)} runs)"
        if prior is None:
            return self.default_s, "default"
        where = "tenant" if self.by_tenant.get(fp.tenant) else "cluster"
        return math.exp(prior), f"novel: {where} p{round(self.q * 100)}"


def evaluate_philly(path: Path, split: str = "2017-11-01") -> dict:
    """Replay the Pollux Philly job list; score jobs submitted from ``split`` on (see the module docstring)."""
    frame = pd.read_csv(path)
    need = {"timestamp", "duration", "num_gpus", "cluster"}
    if not need <= set(frame.columns):
        raise ValueError(f"{path}: columns {sorted(need - set(frame.columns))} missing")
    frame["t"] = (pd.to_datetime(frame["timestamp"], utc=True) - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
    frame = frame.dropna(subset=["t", "duration"]).sort_values("t", kind="stable").reset_index(drop=True)
    cut = pd.Timestamp(split, tz="UTC").timestamp()
    model = DurationPredictor()
    tenant_sum: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    finished: list[tuple[float, int]] = []  # (end time, row)
    seen: set[Fingerprint] = set()
    rows = []
    for i, job in enumerate(frame.itertuples(index=False)):
        while finished and finished[0][0] <= job.t:  # runtimes known by now
            _, j = heapq.heappop(finished)
            done = frame.iloc[j]
            fpd = fingerprint(tenant=str(done.cluster), gpus=int(done.num_gpus))
            model.observe(fpd, float(done.duration))
            seen.add(fpd)
            acc = tenant_sum[str(done.cluster)]
            acc[0] += 1
            acc[1] += float(done.duration)
        fp = fingerprint(tenant=str(job.cluster), gpus=int(job.num_gpus))
        if job.t >= cut:
            pred, how = model.predict(fp)
            known = tenant_sum.get(str(job.cluster))
            mean = known[1] / known[0] if known and known[0] else float("nan")
            rows.append((float(job.duration), pred, mean, fp in seen, how))
        heapq.heappush(finished, (job.t + float(job.duration), i))
    res = pd.DataFrame(rows, columns=["actual", "ours", "tenant_mean", "recurring", "how"])
    rec = res[res.recurring & res.tenant_mean.notna()]

    def mae(col: str, part: pd.DataFrame) -> float:
        return float((part[col] - part["actual"]).abs().median())

    return {
        "fingerprint": "(virtual cluster, GPU count): the Pollux copy of the Philly trace has no user, job name or image",
        "baseline": "mean duration of the tenant's (virtual cluster's) past finished jobs",
        "train_before": split, "test_jobs": len(res), "recurring_test_jobs": len(rec),
        "median_abs_error_s": {"ours_recurring": mae("ours", rec), "tenant_mean_recurring": mae("tenant_mean", rec),
                               "ours_all": mae("ours", res)},
        "median_abs_log_ratio": {"ours_recurring": float(np.median(np.abs(np.log(rec.ours / rec.actual.clip(lower=1))))),
                                 "tenant_mean_recurring": float(np.median(np.abs(np.log(rec.tenant_mean / rec.actual.clip(lower=1)))))},
        "novel_jobs_predicted_at_or_above_actual": float((res[~res.recurring].ours >= res[~res.recurring].actual).mean())
        if (~res.recurring).any() else None,
    }
