"""The simulated-fleet evaluation: streams of per-GPU observations scored by the
``HealthBook`` and by the peers' never-recover rule, against the ground truth of a fault plan.

Like ``hbm`` for the Calchas file, this module decides nothing itself: every state comes from
``score_stream`` (the code the service runs); it only keeps each GPU's state changes as a timeline
and measures them. The ground truth is plain data (``GpuTruth``), so this module knows nothing of
how the faults were drawn (``gpuaware.sim.fleet_faults`` draws them; the benchmark joins the two).

Definitions:

* a failure is *flagged at lead L* (10 minutes by default) when the GPU's state at ``T - L``, after
  every observation at or before that instant, was degraded or quarantined; its *lead time* is
  ``T`` minus the start of that flagged run (the last time the GPU went from healthy to flagged);
* the headline counts only failures that *have precursors*: something the telemetry shows at
  least ``L`` before the failure (the fault plan says which, ``GpuTruth.failures``);
* a *healthy* GPU has no hard failure in the window (transient faults allowed); an *untouched*
  one has no fault at all; "ever quarantined / degraded" is measured inside the window, over all
  healthy GPUs and per kind of transient fault (the share among the GPUs that had one, which does
  not depend on how often the fault model draws them);
* a GPU *recovered* from transient faults when it was flagged and was healthy again at the end of
  the window; only GPUs whose last transient ended ``recover_margin_s`` before the end count
  (the default clean periods need a day per level);
* the peers' rule (NVIDIA k8s-device-plugin, HAMi): unhealthy from the first XID outside the
  application list (13, 31, 43, 45, 68, 109) or the first uncorrectable ECC error, until the
  plugin restarts, which here never happens (nobody intervenes in either rule's run); it is
  scored on the same observations.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaware.health import LEVEL, HealthBook, HealthConfig, Observation, score_stream
from gpuaware.schemas import percentile

__all__ = [
    "PEER_IGNORED_XIDS",
    "FailureTruth",
    "FleetRun",
    "GpuTruth",
    "NeverRecoverRule",
    "Timeline",
    "fleet_metrics",
    "history_observations",
    "minute_observations",
    "score_gpu",
]

HOUR = 3600.0
DAY = 86400.0
PEER_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""the device plugin's application XIDs (never a health event for it)"""


class NeverRecoverRule:
    """The peers' rule on the same observations: one unhealthy flag per GPU, never lifted."""

    def __init__(self) -> None:
        self.tripped: dict[str, float] = {}
        self._ue: dict[str, int] = {}

    def observe(self, obs: Observation) -> bool:
        """True once the GPU is unhealthy (from this observation on)."""
        uuid = obs.gpu_uuid
        if uuid in self.tripped:
            return True
        ue = obs.ecc_uncorrected_delta or 0
        for cum in (obs.ecc_uncorrected_aggregate, obs.ecc_uncorrected_volatile):
            if cum is not None:
                prev = self._ue.get(uuid)
                self._ue[uuid] = cum
                ue = max(ue, cum - prev if prev is not None and cum > prev else 0)
                break
        if ue > 0 or any(x not in PEER_IGNORED_XIDS for x in obs.xids):
            self.tripped[uuid] = obs.at
            return True
        return False


@dataclass(slots=True)
class Timeline:
    """A GPU's state over time: ``(time, level)`` at every change (0 healthy, 1 degraded, 2 quarantined)."""

    changes: list[tuple[float, int]] = field(default_factory=list)

    def add(self, at: float, level: int) -> None:
        if not self.changes or self.changes[-1][1] != level:
            self.changes.append((at, level))

    def level_at(self, t: float) -> int:
        k = bisect.bisect_right(self.changes, (t, math.inf)) - 1
        return self.changes[k][1] if k >= 0 else 0

    def flagged_since(self, t: float) -> float | None:
        """Start of the flagged run holding at ``t`` (None when healthy at ``t``)."""
        k = bisect.bisect_right(self.changes, (t, math.inf)) - 1
        if k < 0 or self.changes[k][1] == 0:
            return None
        while k > 0 and self.changes[k - 1][1] > 0:
            k -= 1
        return self.changes[k][0]

    def hours(self, level: int, start: float, end: float, *, exactly: bool = False) -> float:
        """Hours in ``[start, end)`` at ``level`` (or above, unless ``exactly``)."""
        total = 0.0
        cur = self.level_at(start)
        t = start
        k = bisect.bisect_right(self.changes, (start, math.inf))
        for at, lv in [*self.changes[k:], (end, -1)]:
            if at >= end:
                at = end
            if (cur == level) if exactly else (cur >= level):
                total += at - t
            if at >= end:
                break
            t, cur = at, lv
        return total / HOUR

    def ever(self, level: int, start: float, end: float) -> bool:
        return self.hours(level, start, end) > 0 or any(
            start <= at <= end and lv >= level for at, lv in self.changes)


@dataclass(frozen=True, slots=True)
class FailureTruth:
    at: float
    end: float
    kind: str
    precursors: tuple[str, ...] = ()
    """what the telemetry shows at least the lead before the failure (empty: nothing)"""
    from_data: bool = False
    """a precursor taken from the real data (a replayed Calchas history, a StepFun recurrence)"""


@dataclass(frozen=True, slots=True)
class GpuTruth:
    gpu_uuid: str
    failures: tuple[FailureTruth, ...] = ()
    transients: tuple[tuple[str, float, float], ...] = ()
    """(kind, start, end) of each transient fault"""


def minute_observations(gpu_uuid: str, *, node: str, gpu_index: int, model: str | None,
                        times: Sequence[float], columns: Mapping[str, Sequence[Any]],
                        xids: Mapping[int, tuple[int, ...]] | None = None, present: Sequence[bool] | None = None,
                        interval_s: float = 60.0) -> Iterator[Observation]:
    """One ``Observation`` per step: ``columns`` maps Observation field names to one value per step
    (plain Python values: pass ``array.tolist()``); steps where ``present`` is false are skipped."""
    names = tuple(columns)
    xids = xids or {}
    for k, (t, row) in enumerate(zip(times, zip(*columns.values(), strict=True), strict=True)):
        if present is not None and not present[k]:
            continue
        yield Observation(gpu_uuid=gpu_uuid, node=node, gpu_index=gpu_index, model=model, at=t,
                          interval_s=interval_s, xids=xids.get(k, ()), **dict(zip(names, row, strict=True)))


def history_observations(gpu_uuid: str, *, node: str, gpu_index: int, model: str | None,
                         before: Iterable[tuple[float, int, int, tuple[int, ...]]],
                         interval_s: float = HOUR) -> Iterator[Observation]:
    """A GPU's months before the window, at the history's cadence: ``(time, corrected cumulative,
    uncorrectable cumulative, XIDs)`` per mark (the Calchas replay's form)."""
    for t, ce, ue, xs in before:
        yield Observation(gpu_uuid=gpu_uuid, node=node, gpu_index=gpu_index, model=model, at=t,
                          interval_s=interval_s, ecc_corrected_aggregate=ce, ecc_uncorrected_aggregate=ue, xids=xs)


def score_gpu(book: HealthBook, rule: NeverRecoverRule, observations: Iterable[Observation]
              ) -> tuple[Timeline, Timeline, int]:
    """Score one GPU's stream (time order) through ``score_stream`` and the peers' rule.
    Returns (ours, peers', observations scored)."""
    ours, peers = Timeline(), Timeline()
    count = 0

    def tee() -> Iterator[Observation]:
        nonlocal count
        for o in observations:
            count += 1
            if rule.observe(o):
                peers.add(rule.tripped[o.gpu_uuid], 2)
            yield o

    for a in score_stream(tee(), book=book):
        if a.changed:
            ours.add(a.at, LEVEL[a.state])
    return ours, peers, count


@dataclass(slots=True)
class FleetRun:
    """Timelines of every GPU (ours, the peers'), and the truth they are measured against."""

    start: float
    end: float
    truths: dict[str, GpuTruth]
    ours: dict[str, Timeline] = field(default_factory=dict)
    peers: dict[str, Timeline] = field(default_factory=dict)
    observations: int = 0
    config: HealthConfig = field(default_factory=HealthConfig)
    info: dict[str, Any] = field(default_factory=dict)
    """what the caller wants to keep about the run (timings, counters)"""


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _detection(failures: list[tuple[FailureTruth, Timeline]], lead_s: float) -> dict[str, Any]:
    leads: list[float] = []
    caught = at_failure = 0
    for f, tl in failures:
        since = tl.flagged_since(f.at - lead_s)
        if since is not None:
            caught += 1
            leads.append((f.at - since) / HOUR)
        if tl.level_at(f.at + lead_s) >= 1:
            at_failure += 1
    n = len(failures)
    return {
        "failures": n,
        "flagged_before": caught,
        "flagged_share": _r(caught / n, 4) if n else None,
        "lead_h_median": _r(percentile(leads, 50), 2) if leads else None,
        "lead_h_p10": _r(percentile(leads, 10), 2) if leads else None,
        "flagged_within_lead_after": _r(at_failure / n, 4) if n else None,
    }


def fleet_metrics(run: FleetRun, *, lead_s: float = 600.0, recover_margin_s: float = 2 * DAY) -> dict[str, Any]:
    """Every figure of section (b), for our rules and the peers' side by side."""
    start, end = run.start, run.end
    out: dict[str, Any] = {"lead_s": lead_s, "recover_margin_s": recover_margin_s}
    failing = {u for u, t in run.truths.items() if any(start < f.at <= end for f in t.failures)}
    healthy = [u for u in run.truths if u not in failing]
    transient = [u for u in healthy if run.truths[u].transients]
    untouched = [u for u in healthy if not run.truths[u].transients]
    for name, tls in (("ours", run.ours), ("peers", run.peers)):
        fails = [(f, tls[u]) for u, t in run.truths.items() for f in t.failures if start < f.at <= end]
        with_pre = [(f, tl) for f, tl in fails if f.precursors]
        by_kind: dict[str, Any] = {}
        for p in sorted({f.precursors[0] for f, _ in with_pre}):
            by_kind[p] = _detection([(f, tl) for f, tl in with_pre if f.precursors[0] == p], lead_s)
        by_fault: dict[str, Any] = {}
        for k in sorted({f.kind for f, _ in fails}):
            by_fault[k] = _detection([(f, tl) for f, tl in with_pre if f.kind == k], lead_s) | {
                "all": len([1 for f, _ in fails if f.kind == k])}

        def share(uuids: list[str], level: int, tls: dict[str, Timeline] = tls) -> float | None:
            return _r(sum(tls[u].ever(level, start, end) for u in uuids) / len(uuids), 4) if uuids else None

        flagged_t = [u for u in transient if tls[u].ever(1, start, end)]
        eligible = [u for u in flagged_t if max(e for _, _, e in run.truths[u].transients) <= end - recover_margin_s]
        recovered = [u for u in eligible if tls[u].level_at(end) == 0]
        cleared = [(u, f) for u in failing for f in run.truths[u].failures
                   if start < f.at <= end and f.end <= end - recover_margin_s and tls[u].level_at(f.end) >= 1]

        def hours(uuids: list[str], level: int, exactly: bool = False, tls: dict[str, Timeline] = tls) -> float:
            return round(sum(tls[u].hours(level, start, end, exactly=exactly) for u in uuids), 1)

        by_transient: dict[str, Any] = {}
        for kind in sorted({k for u in transient for k, _, _ in run.truths[u].transients}):
            us = [u for u in transient if any(k == kind for k, _, _ in run.truths[u].transients)]
            only_kind = [u for u in us if {k for k, _, _ in run.truths[u].transients} == {kind}]
            by_transient[kind] = {"gpus": len(us), "ever_quarantined": share(us, 2), "ever_degraded": share(us, 1),
                                  "gpus_with_only_this_kind": len(only_kind),
                                  "only_this_kind_ever_flagged": share(only_kind, 1)}
        pre_h = round(sum(tls[u].hours(1, start, f.at) for u in failing for f in run.truths[u].failures
                          if start < f.at <= end), 1)
        out[name] = {
            "detection": _detection(with_pre, lead_s),
            "detection_from_data_only": _detection([(f, tl) for f, tl in with_pre if f.from_data], lead_s),
            "detection_without_precursors": _detection([(f, tl) for f, tl in fails if not f.precursors], lead_s),
            "by_precursor": by_kind,
            "by_fault_kind": by_fault,
            "healthy_gpus": len(healthy),
            "healthy_ever_quarantined": share(healthy, 2),
            "healthy_ever_degraded": share(healthy, 1),
            "untouched_gpus": len(untouched),
            "untouched_ever_quarantined": share(untouched, 2),
            "untouched_ever_degraded": share(untouched, 1),
            "transient_gpus": len(transient),
            "transient_flagged": len(flagged_t),
            "by_transient": by_transient,
            "transient_recovered": {"eligible": len(eligible), "recovered": len(recovered),
                                    "share": _r(len(recovered) / len(eligible), 4) if eligible else None},
            "hard_faults_cleared": {
                "eligible": len(cleared),
                "back_in_service": sum(tls[u].level_at(end) <= 1 for u, _ in cleared),
                "back_to_healthy": sum(tls[u].level_at(end) == 0 for u, _ in cleared),
            },
            "unhealthy_gpu_hours": {
                "flagged": hours(list(run.truths), 1),
                "quarantined": hours(list(run.truths), 2),
                "degraded": hours(list(run.truths), 1, exactly=True),
                "healthy_gpus_flagged": hours(healthy, 1),
                "healthy_gpus_quarantined": hours(healthy, 2),
                "failing_gpus_flagged_before_failure": pre_h,
                "failing_gpus_flagged": hours(sorted(failing), 1),
            },
        }
    return out
