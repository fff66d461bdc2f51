"""The simulated fleet's fault model (gpuaware.sim.fleet_faults): every rate, mix, duration and
precursor comes from the data files, computed as written in the comments; the real files are checked
too when present (GPUAWARE_SHARED_DATA, default ../shared/data)."""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

import numpy as np
import pytest

from gpuaware.sim.fleet_faults import (
    Assumptions,
    Effects,
    FaultKind,
    Heat,
    Outage,
    Point,
    Replays,
    calibrate,
    draw_plan,
    load_calibration,
    parse_calchas,
    parse_stepfun,
    render,
)

H = 3600.0
D = 86400.0


def ev(node: str, t: float, kind: str, cls: str, desc: str) -> dict:
    return {"node_id": node, "event_time": t, "event_type": kind,
            "fault_type": {"Level": "Hardware Failure", "Class": cls, "Desc": desc}}


def fault(node: str, start: float, end: float, desc: str, cls: str = "GPU") -> list[dict]:
    return [ev(node, start, "fault_start", cls, desc), ev(node, end, "fault_end", cls, desc)]


DBE = "GPU DBE(Double Bit ECC) > Threshold"
LOST = "GPU Lost"
PCIE = "GPU PCI link width low"

# 4 servers named in the trace; the fleet is 10 servers (assumption), the last event on day 100
TRACE = [
    *fault("a", 10.0, 10.5, DBE),          # 12 h
    *fault("a", 40.0, 41.0, LOST),         # 24 h, 30 days after the DBE on the same server: a recurrence
    *fault("b", 20.0, 20.25, DBE),         # 6 h
    *fault("c", 50.0, 53.0, PCIE),         # 72 h, no earlier fault on c
    *fault("d", 60.0, 61.0, "Speed Critical (Sensor)", cls="Fan"),   # 24 h fan fault
    *fault("d", 99.0, 100.0, "Link Down", cls="Parameter Plane Cable"),  # not GPU class: ignored
]
TITAN = """SN,location,insert,remove,duration,out,event
1,x,2014-01-01,2015-01-01,3600000,TRUE,DBE
2,x,2014-01-01,2015-01-01,7200000,TRUE,OTB
3,x,2014-01-01,2015-01-01,3600000,FALSE,
4,x,,2016-01-01,,,DBE
"""
# server s1: CE at hour 0 (3 of them), UE at hour 10, UE at hour 100 (an episode: 90 h after the last UE)
# server s2: CE burst at hours 200-201 (2 + 4) and nothing after: quiet noise; one UE at hour 500 (first episode)
T0 = 1_650_000_000
CALCHAS = "Server,Time,EccType\n" + "\n".join(
    [f"s1,{T0},CE"] * 3 + [f"s1,{T0 + 10 * 3600},UER", f"s1,{T0 + 100 * 3600},UEO", f"s1,{T0 + 100 * 3600},UEO"]
    + [f"s2,{T0 + 200 * 3600},CE"] * 2 + [f"s2,{T0 + 201 * 3600},CE"] * 4 + [f"s2,{T0 + 500 * 3600},UER"]) + "\n"
ASSUME = Assumptions(stepfun_servers=10, gpus_per_server=8, lookback_days=180.0)


def synthetic():
    return calibrate(TRACE, io.StringIO(TITAN), io.StringIO(CALCHAS), ASSUME)


def test_rates_mix_and_durations_come_from_the_files() -> None:
    cal = synthetic()
    # 4 GPU-class faults over 10 servers x 8 GPUs x 100 days x 24 h = 192,000 GPU-hours
    assert cal.gpu_faults == 4
    assert cal.stepfun_span_days == 100.0
    assert cal.gpu_faults_per_gpu_hour == pytest.approx(4 / 192_000)
    assert cal.mix[FaultKind.DBE] == 2 and cal.mix[FaultKind.GPU_LOST] == 1 and cal.mix[FaultKind.PCIE_LINK] == 1
    assert cal.mix[FaultKind.XID] == 0
    # durations: fault_end - fault_start in hours, per kind
    assert sorted(cal.durations_h[FaultKind.DBE]) == [6.0, 12.0]
    assert cal.durations_h[FaultKind.PCIE_LINK] == (72.0,)
    # recurrence: of the 2 non-DBE faults, the GPU lost on "a" follows the DBE 30 days (720 h) before it
    assert cal.recurrence_eligible == 2
    assert cal.recurrence_pairs == ((720.0, FaultKind.DBE),)
    assert cal.recurrence_share == 0.5
    # one fan fault over 10 servers x 100 days x 24 h
    assert cal.fan_faults_per_server_hour == pytest.approx(1 / 24_000)
    assert cal.fan_durations_h == (24.0,)
    # Titan: 3600000 + 7200000 + 3600000 s = 4000 GPU-hours over 3 DBE/OTB removals (the one without a duration counts)
    assert cal.titan.gpu_hours == pytest.approx(4000.0)
    assert cal.titan.removals == {"DBE": 2, "OTB": 1}
    assert cal.titan.hours_per_removal == pytest.approx(4000 / 3)
    s = cal.summary()
    assert s["stepfun"]["per_1000_server_days"] == pytest.approx(1000 * 4 / (10 * 100), abs=1e-3)


def test_calchas_episodes_keep_their_history_and_quiet_bursts_are_noise() -> None:
    c = parse_calchas(io.StringIO(CALCHAS), lookback_days=180.0)
    by = {(e.server, e.onset_ue): e for e in c.episodes}
    # s1: first episode at hour 10 (CE 10 h before it), second at hour 100 (2 UEO; the UE 90 h and the CEs 100 h before)
    first, second = by[("s1", 1)], by[("s1", 2)]
    assert first.first_on_server and first.before == ((10.0, 3, 0),)
    assert not second.first_on_server and second.before == ((100.0, 3, 0), (90.0, 0, 1))
    assert second.earlier_ue and not first.earlier_ue and first.earlier_ce
    # s2's CE burst at hours 200-201 is followed by a UE only 300 h later (> 7 days): quiet noise
    assert c.quiet_ce_bursts == (((0.0, 2), (1.0, 4)),)
    # s1's CEs at hour 0 are followed by a UE 10 h later: not noise
    assert len(c.episodes) == 3


def test_calchas_lookback_cuts_old_history() -> None:
    c = parse_calchas(io.StringIO(CALCHAS), lookback_days=4.0)   # 96 h: the CEs 100 h before drop out
    second = next(e for e in c.episodes if e.onset_ue == 2)
    assert second.before == ((90.0, 0, 1),)


def test_stepfun_pairs_refuse_an_end_without_start() -> None:
    with pytest.raises(ValueError, match="without a start"):
        parse_stepfun([ev("a", 1.0, "fault_end", "GPU", DBE)])
    with pytest.raises(ValueError, match="never end"):
        parse_stepfun([ev("a", 1.0, "fault_start", "GPU", DBE)])


def test_plan_is_deterministic_and_scaled() -> None:
    cal = synthetic()
    a = draw_plan(cal, n_gpus=400, start=0.0, days=7, scale=200, seed=3)
    b = draw_plan(cal, n_gpus=400, start=0.0, days=7, scale=200, seed=3)
    assert a.failures == b.failures and a.transients == b.transients
    assert draw_plan(cal, n_gpus=400, start=0.0, days=7, scale=0, seed=3).failures == ()
    # rate 4/192,000 per GPU-hour x 200 x 168 h = 0.7 per GPU-week: 400 * (1 - e^-0.7) = 201 expected
    expected = 400 * (1 - math.exp(-4 / 192_000 * 200 * 168))
    assert a.rates["expected_hard_failures"] == pytest.approx(expected)
    assert abs(len(a.failures) - expected) < 4 * math.sqrt(expected)
    assert all(0.0 < f.at <= 7 * D for f in a.failures)
    kinds = {f.kind for f in a.failures}
    assert kinds <= {FaultKind.DBE, FaultKind.GPU_LOST, FaultKind.PCIE_LINK}


def test_dbe_failures_replay_a_real_history_ending_at_the_failure() -> None:
    cal = synthetic()
    plan = draw_plan(cal, n_gpus=300, start=0.0, days=7, scale=200, seed=5)
    dbe = [f for f in plan.failures if f.kind is FaultKind.DBE]
    assert dbe
    onsets = {e.onset_ue for e in cal.calchas.episodes}
    for f in dbe:
        noise = [(t.start, t.end) for t in plan.transients if t.gpu == f.gpu and t.kind == "ce_burst"]
        pts = [p for p in plan.effects_of(f.gpu).points
               if (p.ue or p.ce) and not any(a <= p.at <= b for a, b in noise)]
        at_failure = [p for p in pts if p.at == f.at]
        assert len(at_failure) == 1 and at_failure[0].ue in onsets
        before = sorted((f.at - p.at) / H for p in pts if p.at < f.at)
        # one of the three episodes' histories: s1's first (CE 10 h before), s1's second (UE 90 h, CE 100 h
        # before), s2's (its quiet CE burst 300 and 299 h before)
        assert before in ([10.0], [90.0, 100.0], [299.0, 300.0])
        assert f.precursors == (("hbm_recurrence",) if before == [90.0, 100.0] else ("hbm_ce",))


def test_render_places_counts_outages_replays_and_heat() -> None:
    fx = Effects(points=[Point(90.0, ce=2), Point(120.0, ue=1, xids=(79,)), Point(-3600.0, ue=3)],
                 outages=[Outage(240.0, 360.0)], replays=[Replays(0.0, 300.0, 10.0, 10.0)],
                 heats=[Heat(start=0.0, end=1e9, anchor=600.0, rate_c_per_min=5.0, over_c=8.0)])
    r = render(fx, start=0.0, step_s=60.0, n=12, base_temp_c=np.full(12, 50.0), slowdown_c=87.0)
    # observation k at (k+1)*60 covers ((k)*60, (k+1)*60]: the CE at 90 s is in observation 1, the UE at 120 s too
    assert r.ce.tolist()[:3] == [0, 2, 2]
    assert r.ue.tolist()[0] == 3 and r.ue.tolist()[1] == 4      # the UE before the window is in the history
    assert r.xids == {1: (79,)}
    # the history: from one hour before the UE at -3600 (the counters' baseline) to the window's start
    assert r.before == [(-7200.0, 0, 0, ()), (-3600.0, 0, 3, ()), (0.0, 0, 3, ())]
    # no telemetry in (240, 360]: observations at 300 and 360
    assert r.present.tolist() == [True, True, True, True, False, False] + [True] * 6
    # 10 replays a minute for 5 minutes = 50
    assert int(r.pcie[-1]) == 50 and r.pcie.tolist()[:2] == [10, 20]
    # the heat line reaches 87 + 5 = 92 at 600 s rising 5 degC/min: 92 - 45 = 47 at 60 s (below the base 50),
    # 82 at 480 s, 87 at 540 s (the slowdown: SW thermal), then 87 + 8 = 95 held (HW slowdown)
    assert r.temperature_c[0] == pytest.approx(50.0)
    assert r.temperature_c[7] == pytest.approx(82.0) and r.temperature_c[8] == pytest.approx(87.0)
    assert r.temperature_c[9] == pytest.approx(95.0)
    assert r.thermal[7] == 0 and r.thermal[8] == 0x20 and r.thermal[9] == 0x20 | 0x40 | 0x8


def shared_faults() -> Path:
    root = Path(os.environ.get("GPUAWARE_SHARED_DATA") or Path(__file__).resolve().parents[2].parent / "shared" / "data")
    return root / "gpu-faults"


def test_real_files_give_the_published_figures() -> None:
    src = shared_faults()
    if not (src / "stepfun-infinitehbd" / "fault_trace.json").is_file():
        pytest.skip(f"real fault data not found under {src} (set GPUAWARE_SHARED_DATA)")
    cal = load_calibration(src)
    s = cal.summary()
    # PROVENANCE.md: 158 GPU-class faults, DBE 60, unknown device error 40, PCIe link width low 25,
    # XID 11, nvidia-smi timeout 9, GPU lost 5 (+ device not found 1, counted as lost here)
    assert cal.gpu_faults == 158
    assert s["stepfun"]["mix"] == {"dbe": 60, "device_error": 40, "pcie_link": 25, "xid": 11, "smi_timeout": 9,
                                   "gpu_lost": 6, "thermal": 2, "other": 5}
    assert s["stepfun"]["per_1000_server_days"] == pytest.approx(1.13, abs=0.01)
    assert s["titan"]["gpu_hours_per_removal"] == pytest.approx(138_800, rel=0.002)
    assert s["calchas"]["ue_episodes"] == 108 and s["calchas"]["first_on_server"] == 27
