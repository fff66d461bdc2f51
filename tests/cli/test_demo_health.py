"""The demo's health parts without the services: the fault plan, the environment it gives the binder
and health-scoring, and the report's health figures (faults caught, decisions checked against
quarantines, alerts) over a recorded run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaware.cli.demo_analysis import IN_FLIGHT_S, health_figures, virtual_clock
from gpuaware.cli.demo_config import VIRTUAL_EPOCH, DemoConfig, RunSpec, demo_nodes, plan_faults, service_env
from gpuaware.cli.demo_record import RunLog, RunResult
from gpuaware.cli.demo_report import write_html
from gpuaware.schemas import (
    AlertRaised,
    AlertResolved,
    DrainPod,
    DrainRecommended,
    GpuSlice,
    GpuStateChanged,
    HealthState,
    PlacementDecided,
    PodBound,
    Severity,
    fingerprint,
)
from gpuaware.sim.twin import EccSpec, ThermalSpec, XidSpec, decode_faults

C = "demo-x-gpuaware"
W0 = 1_800_000_000.0  # the run's wall clock at the twin's start


def _cfg(tmp_path: Path, speed: float = 576.0) -> DemoConfig:
    return DemoConfig(out=tmp_path, run_id="demo-x", duration_s=86400 / speed, window_s=86400.0, speed=speed,
                      trace="generator", nodes="default", default_nodes=16, load=1.8, seed=7, max_pods=0, slo_s=600)


@pytest.mark.parametrize("speed", [576.0, 1920.0])
def test_the_fault_plan_hits_three_busy_gpus_and_lasts_long_enough_in_wall_time(tmp_path: Path, speed: float) -> None:
    cfg = _cfg(tmp_path, speed)
    plan = plan_faults(cfg, demo_nodes(cfg))
    ecc, xid, heat = plan.specs
    assert isinstance(ecc, EccSpec) and isinstance(xid, XidSpec) and isinstance(heat, ThermalSpec)
    # the three most common models of the 8-GPU nodes of the default 16-node cluster: A100, H100, then L4
    assert [s.node for s in plan.specs] == ["twin-a100-000", "twin-h100-000", "twin-l4-000"]
    assert len({(s.node, s.gpu) for s in plan.specs}) == 3
    assert [s.at_s for s in plan.specs] == [21600.0, 34560.0, 47520.0]  # 25 %, 40 %, 55 % of the day
    # an uncorrectable error every 2 wall seconds; +50 degC over 6 wall seconds, for 10
    assert ecc.uncorrected_per_hour * 2 * speed / 3600 == pytest.approx(1.0)
    assert heat.degrees_per_minute * 6 * speed / 60 == pytest.approx(50.0)
    assert heat.duration_s == pytest.approx(10 * speed)
    assert xid.xid == 79 and plan.repair == 1
    assert plan.repair_at_s == pytest.approx(34560 + max(8640, 8 * speed))
    assert decode_faults(plan.json()) == list(plan.specs)
    env = service_env(cfg, RunSpec("gpuaware", "GpuAware", C), "nats://n", "pg://d", faults=plan.json())
    assert decode_faults(env["binder"]["GPUAWARE_BINDER_FAULTS"]) == list(plan.specs)
    assert env["health"]["GPUAWARE_HEALTH_SCORING_CLUSTER"] == C
    assert float(env["health"]["GPUAWARE_HEALTH_SCORING_TIME_SCALE"]) == speed  # judged in the twin's own time
    assert "GPUAWARE_BINDER_FAULTS" not in service_env(cfg, RunSpec("baseline", "KubeDefault", "b"), "n", "d")["binder"]


def _change(gpu: str, prev: HealthState | None, cur: HealthState, wall: float) -> GpuStateChanged:
    return GpuStateChanged(source="health-scoring/t", emitted_at=wall + 0.2, cluster=C, node="n1", gpu_uuid=gpu,
                           gpu_index=0, current=cur, previous=prev, score=10.0, changed_at=wall,
                           reasons=("xid_79",) if cur is HealthState.QUARANTINED else ())


def _decided(uid: str, gpu: str, wall: float) -> PlacementDecided:
    return PlacementDecided(source="placement/p1", emitted_at=wall, cluster=C, decision_id=f"{uid}/0", pod_uid=uid,
                            pod_name=uid, namespace="ns", node="n1", decided_at=wall, policy="GpuAware", score=50.0,
                            slices=(GpuSlice(gpu_uuid=gpu, gpu_index=0, gpu_milli=1000, memory_mib=0),))


def test_health_figures_catch_faults_and_check_every_decision_against_quarantines(tmp_path: Path) -> None:
    log = RunLog(C)
    # the twin runs 100x: wall W0 + t is virtual VIRTUAL_EPOCH + 100 t
    clock = [(W0 + t, VIRTUAL_EPOCH + 100 * t) for t in range(0, 200, 10)]
    for ev in (_change("g0", None, HealthState.HEALTHY, W0), _change("g1", None, HealthState.HEALTHY, W0),
               _change("g0", HealthState.HEALTHY, HealthState.QUARANTINED, W0 + 50),
               _change("g0", HealthState.QUARANTINED, HealthState.HEALTHY, W0 + 120)):
        log.on_health(ev, "health.gpu.state_changed.v1")
    fp = fingerprint("gpu_xid_critical", {"cluster": C, "node": "n1", "gpu": "g0"})
    log.on_health(AlertRaised(source="h", emitted_at=W0 + 50, cluster=C, fingerprint=fp, rule="gpu_xid_critical",
                              severity=Severity.CRITICAL, summary="XID 79", started_at=W0 + 50, gpu_uuid="g0",
                              node="n1"), "alerts.gpu.raised.v1")
    log.on_health(AlertResolved(source="h", emitted_at=W0 + 90, cluster=C, fingerprint=fp, rule="gpu_xid_critical",
                                severity=Severity.CRITICAL, started_at=W0 + 50, resolved_at=W0 + 90, gpu_uuid="g0"),
                  "alerts.gpu.resolved.v1")
    log.on_health(DrainRecommended(source="h", emitted_at=W0 + 50.2, cluster=C, node="n1", gpu_uuid="g0", gpu_index=0,
                                   state=HealthState.QUARANTINED, risk=0.9, urgent=True, reason="quarantined (xid_79)",
                                   recommended_at=W0 + 50, pods=(DrainPod(pod_uid="a", order=0, checkpointable=True),)),
                  "health.gpu.drain_recommended.v1")
    assert log.quarantined_now() == set()
    # decisions: before the quarantine (fine), in flight as it was published (counted apart), well after
    # it (a violation), after it was lifted (fine), and on the other GPU (fine)
    for uid, gpu, t in (("a", "g0", 40), ("b", "g0", 50.2 + IN_FLIGHT_S / 2), ("c", "g0", 80), ("d", "g0", 130),
                        ("e", "g1", 80)):
        log.on_event(_decided(uid, gpu, W0 + t), "placement.pod.decided.v1")
    log.on_event(PodBound(source="b", emitted_at=W0, cluster=C, pod_uid="a", pod_name="a", namespace="ns", node="n1",
                          slices=(GpuSlice(gpu_uuid="g0", gpu_index=0, gpu_milli=1000, memory_mib=0),),
                          bound_at=VIRTUAL_EPOCH + 4100, decision_id="a/0"), "binder.pod.bound.v1")
    run = RunResult(spec=RunSpec("gpuaware", "GpuAware", C), log=log, gpus={"g0": 0, "g1": 0}, nodes=1,
                    started_at=VIRTUAL_EPOCH, virtual_end=VIRTUAL_EPOCH + 19000, wall_s=190, reached_end=True,
                    messages={}, db={}, snapshot_violations=[], snapshot_pods=0, exit_codes={}, services={},
                    clock=clock, health={"status": "running", "faults": [
                        {"kind": "xid", "label": "XID 79", "node": "n1", "gpu_index": 0, "gpu_uuid": "g0",
                         "at_s": 4500.0, "until_s": None},
                        {"kind": "thermal", "label": "heat", "node": "n1", "gpu_index": 1, "gpu_uuid": "g1",
                         "at_s": 9000.0, "until_s": 10000.0}]})
    h = health_figures(run)
    assert h["decisions_checked"] == 5 and h["decisions_on_quarantined_gpus"] == 1
    assert h["decisions_in_flight_at_a_quarantine"] == 1 and "pod c on g0" in h["violation_examples"][0]
    xid, heat = h["faults"]
    # caught at wall +50 = virtual 5000 s = 1.389 h, 500 virtual s (8.3 min) and 5 wall s after it began
    assert xid["caught"] and xid["caught_state"] == "quarantined" and xid["caught_at_h"] == pytest.approx(1.389, abs=1e-3)
    assert xid["detected_after_virtual_min"] == pytest.approx(8.3, abs=0.05)
    assert xid["detected_after_wall_s"] == pytest.approx(5.2)  # published 0.2 s after the sample's time
    assert xid["pods_running_when_caught"] == 1 and xid["decisions_on_it_while_quarantined"] == 1
    assert [t["to"] for t in xid["timeline"]] == ["quarantined", "healthy"]
    assert xid["first_alert"] == {"rule": "gpu_xid_critical", "at_h": pytest.approx(1.389, abs=1e-3)}
    assert xid["drain"] == {"at_h": pytest.approx(1.389, abs=1e-3), "urgent": True, "pods": 1, "checkpointable": 1,
                            "order": ["a"], "reason": "quarantined (xid_79)"}
    assert "drain" not in heat and h["drain_recommendations"] == {"published": 1, "pods_listed": 1, "urgent": 1}
    assert not heat["caught"] and h["all_faults_caught"] is False
    assert h["alerts"]["raised"] == {"gpu_xid_critical": 1} and h["alerts"]["resolved"] == {"gpu_xid_critical": 1}
    assert h["transitions"] == {"healthy->quarantined": 1, "quarantined->healthy": 1}
    assert health_figures(RunResult(**{**run.__dict__, "health": {"status": "not in this run"}})) == \
        {"status": "not in this run"}
    to_v, to_w = virtual_clock(clock)
    assert to_v(W0 + 55) == VIRTUAL_EPOCH + 5500 and to_w(VIRTUAL_EPOCH + 5500) == W0 + 55
    report = {"summary": "s", "invariants": {}, "runs": {"gpuaware": {"health": h, "messages": {}, "recorded": {},
                                                                      "placement_events_rows": {}}},
              "services": {}}
    write_html(tmp_path / "r.html", report, [])
    page = (tmp_path / "r.html").read_text()
    assert "faults injected into the twin" in page and "NOT CAUGHT" in page and "gpu_xid_critical" in page


def test_a_fault_caught_inside_a_gap_of_clock_samples_is_caught_not_dated_before_it_began() -> None:
    """A slow snapshot on a busy machine left the report no (wall, virtual) sample for a while; the twin
    skipped ahead meanwhile. The quarantine came after the last sample before the fault: it is the
    fault's detection, although interpolating across the gap would date it half an hour too early."""
    log = RunLog(C)
    clock = [(W0, VIRTUAL_EPOCH), (W0 + 10, VIRTUAL_EPOCH + 1000), (W0 + 12, VIRTUAL_EPOCH + 20_000)]
    for ev in (_change("g0", None, HealthState.HEALTHY, W0),
               _change("g0", HealthState.HEALTHY, HealthState.QUARANTINED, W0 + 10.5)):
        log.on_health(ev, "health.gpu.state_changed.v1")
    fault = {"kind": "xid", "label": "XID 79", "node": "n1", "gpu_index": 0, "gpu_uuid": "g0", "at_s": 8000.0,
             "until_s": None}
    run = RunResult(spec=RunSpec("gpuaware", "GpuAware", C), log=log, gpus={"g0": 0}, nodes=1,
                    started_at=VIRTUAL_EPOCH, virtual_end=VIRTUAL_EPOCH + 20_000, wall_s=12, reached_end=True,
                    messages={}, db={}, snapshot_violations=[], snapshot_pods=0, exit_codes={}, services={},
                    clock=clock, health={"status": "running", "faults": [fault]})
    (f,) = health_figures(run)["faults"]
    # interpolated, wall +10.5 is virtual 5,750 s: before the fault's 8,000 s
    assert f["caught"] and f["caught_state"] == "quarantined"
    assert f["detected_after_virtual_min"] == 0.0 and f["detected_after_wall_s"] >= 0.0
    # a quarantine before the last sample preceding the fault is not its detection
    early = RunResult(**{**run.__dict__, "log": RunLog(C)})
    for ev in (_change("g0", None, HealthState.HEALTHY, W0),
               _change("g0", HealthState.HEALTHY, HealthState.QUARANTINED, W0 + 5)):
        early.log.on_health(ev, "health.gpu.state_changed.v1")
    assert not health_figures(early)["faults"][0]["caught"]
