"""The simulated-fleet evaluation (gpuaware.sim.health_fleet): the peers' never-recover rule, timelines, and
small fleets scored end to end (fault model -> per-minute telemetry -> score_stream -> figures)."""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator

import numpy as np
import pytest
from test_fleet_faults import ASSUME, CALCHAS, TITAN, TRACE

from gpuaware.health import HealthBook, HealthConfig, Observation
from gpuaware.sim.fleet_faults import Effects, FaultKind, Outage, Point, Replays, calibrate, draw_plan, render
from gpuaware.sim.health_fleet import (
    FailureTruth,
    FleetRun,
    GpuTruth,
    NeverRecoverRule,
    Timeline,
    fleet_metrics,
    history_observations,
    minute_observations,
    score_gpu,
)

H = 3600.0
D = 86400.0


def o(at: float, **kw: object) -> Observation:
    return Observation(gpu_uuid="g", at=at, **kw)  # type: ignore[arg-type]  # kw holds the keyword fields under test


def test_peer_rule_ignores_application_xids_trips_on_others_and_never_recovers() -> None:
    rule = NeverRecoverRule()
    assert not rule.observe(o(60, xids=(13, 31)))
    assert not rule.observe(o(120, xids=(43, 45, 68, 109)))
    assert not rule.observe(o(180, ecc_uncorrected_aggregate=5))        # a baseline, not an error
    assert not rule.observe(o(240, ecc_uncorrected_aggregate=5))
    assert rule.observe(o(300, xids=(94,)))                            # a contained ECC error: unhealthy
    # a week of clean observations later: still unhealthy, from the first trip
    assert all(rule.observe(o(300 + 60 * k)) for k in range(1, 7 * 1440, 97))
    assert rule.tripped == {"g": 300}
    ue = NeverRecoverRule()
    assert not ue.observe(o(60, ecc_uncorrected_aggregate=2))
    assert ue.observe(o(120, ecc_uncorrected_aggregate=3))              # one more uncorrectable error
    assert NeverRecoverRule().observe(o(60, ecc_uncorrected_delta=1))


@pytest.mark.parametrize("changes, t, level, since", [
    ([(0, 0), (100, 1), (200, 2), (300, 1), (400, 0)], 250, 2, 100),   # flagged run from 100 (1 then 2)
    ([(0, 0), (100, 1), (200, 2), (300, 1), (400, 0)], 400, 0, None),
    ([(0, 0), (100, 1), (200, 2), (300, 1), (400, 0)], 99, 0, None),
    ([(0, 2)], 50, 2, 0),                                             # flagged from the start
    ([], 50, 0, None),
])
def test_timeline_level_and_run_start(changes, t, level, since) -> None:
    tl = Timeline(list(changes))
    assert tl.level_at(t) == level
    assert tl.flagged_since(t) == since


def test_timeline_hours() -> None:
    tl = Timeline([(0, 0), (H, 1), (3 * H, 2), (4 * H, 0)])
    # in [0, 10 h): degraded or worse from 1 h to 4 h = 3 h; quarantined 3 h to 4 h = 1 h; degraded exactly 2 h
    assert tl.hours(1, 0, 10 * H) == pytest.approx(3.0)
    assert tl.hours(2, 0, 10 * H) == pytest.approx(1.0)
    assert tl.hours(1, 0, 10 * H, exactly=True) == pytest.approx(2.0)
    assert tl.hours(1, 2 * H, 3.5 * H) == pytest.approx(1.5)
    assert tl.ever(2, 0, 10 * H) and not tl.ever(2, 5 * H, 10 * H)


def stream(uuid: str, fx: Effects, *, start: float, days: float, base_c: float = 55.0) -> Iterator[Observation]:
    """One GPU's telemetry as the benchmark builds it (per minute, raw-sample form, months before as history)."""
    n = round(days * 1440)
    r = render(fx, start=start, step_s=60.0, n=n, base_temp_c=np.full(n, base_c), slowdown_c=87.0)
    kw = {"node": "node-a", "gpu_index": 0, "model": "A100-80GB"}
    return itertools.chain(
        history_observations(uuid, before=r.before, **kw),
        minute_observations(uuid, times=r.times.tolist(), xids=r.xids, present=r.present.tolist(), columns={
            "temperature_c": r.temperature_c.tolist(), "throttle_reasons": r.thermal.tolist(),
            "ecc_corrected_aggregate": r.ce.tolist(), "ecc_uncorrected_aggregate": r.ue.tolist(),
            "pcie_replay": r.pcie.tolist()}, **kw))


def score(effects: dict[str, Effects], truths: dict[str, GpuTruth], *, start: float, days: float) -> FleetRun:
    book, rule = HealthBook(HealthConfig()), NeverRecoverRule()
    run = FleetRun(start=start, end=start + days * D, truths=truths)
    for uuid in truths:
        run.ours[uuid], run.peers[uuid], n = score_gpu(book, rule, stream(uuid, effects.get(uuid, Effects()),
                                                                          start=start, days=days))
        run.observations += n
    return run


def test_small_fleet_flags_the_failure_with_a_precursor_and_recovers_the_transient() -> None:
    start, days = 1_700_000_000.0, 3.0
    end = start + days * D
    t_dbe, t_pcie, t_gsp = start + 20 * H, start + 30 * H, start + 2 * H
    h1, h2 = start + H, start + 2 * H
    effects = {
        # an uncorrectable burst 30 days before (a Calchas-style recurrence), the DBE failure at 20 h
        "gpu-00": Effects(points=[Point(start - 30 * D, ue=2), Point(t_dbe, ue=4)]),
        # a PCIe link downgrade at 30 h after replays grew for 4 hours from 0 to 40 a minute
        "gpu-01": Effects(replays=[Replays(t_pcie - 4 * H, t_pcie, 0.0, 40.0), Replays(t_pcie, t_pcie + 3 * H, 40, 40)]),
        # a transient replay burst at 1 h: 15 minutes at 30 a minute
        "gpu-02": Effects(replays=[Replays(h1, h1 + 900, 30.0, 30.0)]),
        # a GSP timeout at 2 h (a hard fault without precursor), 20 minutes without telemetry, then fine
        "gpu-03": Effects(points=[Point(t_gsp, xids=(119,))], outages=[Outage(t_gsp, t_gsp + 1200)]),
        # application faults only
        "gpu-04": Effects(points=[Point(start + 3 * H, xids=(13,)), Point(start + 9 * H, xids=(31,)),
                            Point(start + 15 * H, xids=(43,))]),
        # one "high single-bit error rate" warning (XID 92) at 2 h
        "gpu-05": Effects(points=[Point(h2, xids=(92,))]),
    }
    truths = {f"gpu-{k:02d}": GpuTruth(f"gpu-{k:02d}") for k in range(16)}
    truths["gpu-00"] = GpuTruth("gpu-00", failures=(FailureTruth(t_dbe, t_dbe + 3 * H, "dbe", ("hbm_recurrence",), True),))
    truths["gpu-01"] = GpuTruth("gpu-01", failures=(FailureTruth(t_pcie, t_pcie + 3 * H, "pcie_link", ("pcie_ramp",)),))
    truths["gpu-02"] = GpuTruth("gpu-02", transients=(("pcie_burst", h1, h1 + 900),))
    truths["gpu-03"] = GpuTruth("gpu-03", failures=(FailureTruth(t_gsp, t_gsp + 1200, "device_error"),))
    truths["gpu-04"] = GpuTruth("gpu-04", transients=tuple(("app_xid", start + t * H, start + t * H) for t in (3, 9, 15)))
    truths["gpu-05"] = GpuTruth("gpu-05", transients=(("xid_92", h2, h2),))
    run = score(effects, truths, start=start, days=days)
    ours, peers = run.ours, run.peers
    # 16 GPUs x 3 days x 1,440 minutes, less gpu-03's 20 silent minutes, plus gpu-00's 30 days of hourly history
    # (722 marks: the hours from -30 d - 1 h, the counters' baseline, to 0 inclusive)
    assert run.observations == 16 * 3 * 1440 - 20 + 722
    # the DBE: degraded since the burst 30 days before (the aftershock: 1.4 * ln(1 + 168 / 741) = 0.29 expected,
    # risk 0.25 >= 0.05): lead >= 30 days
    assert ours["gpu-00"].level_at(t_dbe - 600) == 1
    assert t_dbe - ours["gpu-00"].flagged_since(t_dbe - 600) >= 30 * D
    # the PCIe link: replays pass 8 a minute 48 minutes into the 4 h ramp (8 / 40 * 4 h): flagged hours before;
    # the peers' rule sees no XID and no ECC error: never
    assert t_pcie - ours["gpu-01"].flagged_since(t_pcie - 600) > 2.5 * H
    assert not peers["gpu-01"].ever(1, start, end)
    # the transient replay burst: degraded during it, healthy a day after its replay rate (a 5-minute average)
    # fell under 8 a minute: 5 min * ln(30 / 8) = 6.6 minutes after it ended
    assert ours["gpu-02"].ever(1, start, end)
    assert ours["gpu-02"].level_at(h1 + 900 + D) == 1 and ours["gpu-02"].level_at(h1 + 900 + D + 600) == 0
    # the GSP timeout: quarantined at once by both (ours holds it ~11 days: the aftershock of a hard burst)
    assert ours["gpu-03"].level_at(t_gsp + 1260) == 2 and peers["gpu-03"].level_at(t_gsp) == 2
    # XID 92 (hardware): ours degrades at once, for the hour the XID counts (its frequency alone: 168 * 5e-3 / 24
    # = 0.035 expected, 3.4 % < 5 %), then a clean day: healthy ~25 h after it. The peers' rule never lets go
    assert ours["gpu-05"].level_at(h2 + 60) == 1 and ours["gpu-05"].level_at(h2 + 24.5 * H) == 1
    assert ours["gpu-05"].level_at(h2 + 25.5 * H) == 0 and ours["gpu-05"].level_at(end) == 0
    assert peers["gpu-05"].level_at(end) == 2
    # application XIDs: nobody reacts
    assert not ours["gpu-04"].ever(1, start, end) and not peers["gpu-04"].ever(1, start, end)
    m = fleet_metrics(run)
    o, p = m["ours"], m["peers"]
    assert o["detection"]["failures"] == 2 and o["detection"]["flagged_share"] == 1.0
    assert p["detection"]["flagged_share"] == 0.5                       # the earlier UE only
    assert o["detection_without_precursors"]["failures"] == 1
    # 13 healthy GPUs (no hard failure): none quarantined by ours, gpu-05 by the peers
    assert o["healthy_gpus"] == 13 and o["healthy_ever_quarantined"] == 0.0
    assert p["healthy_ever_quarantined"] == pytest.approx(1 / 13, abs=1e-4)
    assert o["healthy_ever_degraded"] == pytest.approx(2 / 13, abs=1e-4)   # gpu-02 and gpu-05
    # transients ended more than 2 days before the end: both recovered with ours, the peers' one never
    assert o["transient_recovered"] == {"eligible": 2, "recovered": 2, "share": 1.0}
    assert p["transient_recovered"] == {"eligible": 1, "recovered": 0, "share": 0.0}
    # gpu-05 held by the peers from 2 h to 72 h
    assert p["unhealthy_gpu_hours"]["healthy_gpus_quarantined"] == pytest.approx(70.0, abs=0.05)
    assert o["unhealthy_gpu_hours"]["healthy_gpus_quarantined"] == 0.0


def test_drawn_fleet_catches_every_replayed_recurrence_and_peers_never_recover() -> None:
    """16 GPUs, 1 day, the synthetic data's rate x 3,000 (most GPUs fail): every DBE failure replaying an
    episode with an earlier uncorrectable error (s1's second) is flagged >= 10 minutes before it; every GPU the
    peers' rule flags stays flagged to the end."""
    cal = calibrate(TRACE, io.StringIO(TITAN), io.StringIO(CALCHAS), ASSUME)
    start, days = 1_700_000_000.0, 1.0
    plan = draw_plan(cal, n_gpus=16, start=start, days=days, scale=3000, seed=11)
    uuids = [f"gpu-{g:02d}" for g in range(16)]
    truths = {u: GpuTruth(u, failures=tuple(FailureTruth(f.at, f.end, f.kind.value, f.precursors, f.from_data)
                                            for f in plan.failures if f.gpu == g),
                          transients=tuple((t.kind, t.start, t.end) for t in plan.transients if t.gpu == g))
              for g, u in enumerate(uuids)}
    run = score({u: plan.effects_of(g) for g, u in enumerate(uuids)}, truths, start=start, days=days)
    recurrences = [(uuids[f.gpu], f) for f in plan.failures if f.kind is FaultKind.DBE and "hbm_recurrence" in f.precursors]
    assert recurrences, "the seed draws at least one replayed recurrence"
    for u, f in recurrences:
        assert run.ours[u].level_at(f.at - 600) >= 1, u
    for tl in run.peers.values():
        if tl.changes:
            assert tl.level_at(run.end) == 2 and len(tl.changes) == 1
    m = fleet_metrics(run)
    assert m["ours"]["detection"]["failures"] == sum(bool(f.precursors) for f in plan.failures)
