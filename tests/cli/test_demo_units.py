"""The demo's parts without the services: the run log's accounting, the replayed GPU ledger, the
report's analysis, and service processes."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import msgspec
import pytest

from gpuaware.cli.demo_analysis import analyse, compare, forecast_ab, pod_records
from gpuaware.cli.demo_config import NO_FORECASTS, VIRTUAL_EPOCH, DemoConfig, RunSpec, service_env
from gpuaware.cli.demo_record import RunLog, RunResult, subject_key
from gpuaware.cli.demo_report import write_html, write_plots
from gpuaware.cli.processes import ProcessGroup, listed_process, service_built, service_command
from gpuaware.schemas import (
    PROCESSES,
    CheckpointAcknowledged,
    CheckpointRequested,
    CheckpointStatus,
    GpuSlice,
    PlacementDecided,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodOutcome,
    PodPending,
    PodPreempted,
    PodUnschedulable,
    process_named,
)
from gpuaware.sim.workload_gen import PodClass, SimPod

C = "c1"
T0 = VIRTUAL_EPOCH


def pending(uid: str, at: float, *, attempt: int = 0, milli: int = 1000, gpus: int = 1, queue: str = "a") -> PodPending:
    return PodPending(source="t", emitted_at=T0 + at, cluster=C, pod_uid=uid, pod_name=uid, namespace=queue,
                      submitted_at=T0 + at, num_gpu=gpus, gpu_milli=milli, queue=queue, attempt=attempt,
                      expected_duration_s=1000.0)


def slices(*gpu: tuple[str, int]) -> tuple[GpuSlice, ...]:
    return tuple(GpuSlice(gpu_uuid=g, gpu_index=0, gpu_milli=m, memory_mib=0) for g, m in gpu)


def decided(uid: str, attempt: int = 0, node: str = "n1", sl: tuple[GpuSlice, ...] = ()) -> PlacementDecided:
    return PlacementDecided(source="t", emitted_at=1.0, cluster=C, decision_id=f"{uid}/{attempt}", pod_uid=uid,
                            pod_name=uid, namespace="a", node=node, slices=sl, policy="P", score=1.0, decided_at=1.0,
                            attempt=attempt)


def bound(uid: str, at: float, sl: tuple[GpuSlice, ...], attempt: int = 0) -> PodBound:
    return PodBound(source="t", emitted_at=T0 + at, cluster=C, pod_uid=uid, pod_name=uid, namespace="a", node="n1",
                    slices=sl, bound_at=T0 + at, decision_id=f"{uid}/{attempt}")


def finished(uid: str, at: float, start: float) -> PodFinished:
    return PodFinished(source="t", emitted_at=T0 + at, cluster=C, pod_uid=uid, pod_name=uid, namespace="a",
                       outcome=PodOutcome.SUCCEEDED, finished_at=T0 + at, started_at=T0 + start, node="n1")


def unschedulable(uid: str, reason: str, attempt: int = 0) -> PodUnschedulable:
    return PodUnschedulable(source="t", emitted_at=1.0, cluster=C, pod_uid=uid, pod_name=uid, namespace="a",
                            reason=reason, attempt=attempt)


def bind_failed(uid: str, attempt: int, reason: str) -> PodBindFailed:
    return PodBindFailed(source="t", emitted_at=T0, cluster=C, pod_uid=uid, pod_name=uid, namespace="a", node="n1",
                         decision_id=f"{uid}/{attempt}", reason=reason, transient=True, failed_at=T0, attempt=attempt)


def preempted(uid: str, at: float) -> PodPreempted:
    return PodPreempted(source="t", emitted_at=T0 + at, cluster=C, pod_uid=uid, pod_name=uid, namespace="a",
                        node="n1", reason="priority", preempted_at=T0 + at, decision_id="x/0", requeued=True)


def feed(log: RunLog, *events: object) -> RunLog:
    subjects = {PodPending: "binder.pod.pending.v1", PlacementDecided: "placement.pod.decided.v1.c1",
                PodUnschedulable: "placement.pod.unschedulable.v1", PodBound: "binder.pod.bound.v1.c1.n1",
                PodFinished: "binder.pod.finished.v1", PodBindFailed: "binder.pod.bind_failed.v1",
                PodPreempted: "binder.pod.preempted.v1"}
    for ev in events:
        log.on_event(ev, subjects[type(ev)])
    return log


def scenario() -> RunLog:
    g = slices(("g0", 500))
    return feed(
        RunLog(C),
        pending("done", 0), decided("done", sl=slices(("g1", 1000))), bound("done", 10, slices(("g1", 1000))),
        finished("done", 110, 10),
        pending("running", 5, milli=500), decided("running", sl=g), bound("running", 20, g),
        pending("waiting", 30), unschedulable("waiting", "insufficient_gpu"),
        pending("inflight", 40), decided("inflight"),
        pending("refused", 50), decided("refused"), bind_failed("refused", 0, "gpu_memory_over_allocated"),
        pending("refused", 50, attempt=1),
        pending("silent", 60),
        msgspec.structs.replace(pending("other-cluster", 0), cluster="elsewhere"),
    )


@pytest.mark.parametrize(("subject", "key"), [
    ("binder.pod.bound.v1", "binder.pod.bound.v1"),
    ("binder.pod.bound.v1.default.node-3", "binder.pod.bound.v1"),
    ("telemetry.gpu.sampled.v1.c.n", "telemetry.gpu.sampled.v1"),
    ("world.snapshot", "world.snapshot"),
    ("deadletter.binder.pod.pending.v1", "deadletter.binder.pod.pending.v1"),
])
def test_subject_key_drops_routing_suffixes(subject: str, key: str) -> None:
    assert subject_key(subject) == key


def test_every_pod_is_accounted_with_a_reason_when_pending() -> None:
    log = scenario()
    acc = log.accounting()
    assert acc == {
        "done": ("finished", ""), "running": ("bound", ""), "waiting": ("pending", "insufficient_gpu"),
        "inflight": ("pending", "decision_in_flight"),
        "refused": ("pending", "bind_failed: gpu_memory_over_allocated (re-queued)"), "silent": ("pending", ""),
    }  # the other cluster's pod is not ours; "silent" is what the invariant catches
    log.explained["silent"] = "0/2 nodes: 2 insufficient_gpu"
    assert log.accounting()["silent"] == ("pending", "explained: 0/2 nodes: 2 insufficient_gpu")
    assert log.counts() == {"arrived": 6, "pending": 4, "bound": 1, "finished": 1, "decided": 4, "unschedulable": 1}
    assert log.recorded["placement.pod.decided.v1"] == 4 and log.bind_failures == {"gpu_memory_over_allocated": 1}


def test_checkpoint_handshakes_are_counted_for_the_recorder_and_change_no_pod() -> None:
    # the recorder stores the binder's checkpoint events too: the run log counts them, so the report's
    # comparison of placement_events with the bus covers them, and leaves the pods' states alone
    log = scenario()
    states = dict(log.state)
    req = CheckpointRequested(source="binder/t", emitted_at=T0, cluster=C, request_id="r1", pod_uid="running",
                              pod_name="running", namespace="a", node="n1", reason="preemption", deadline_s=30.0,
                              requested_at=T0)
    ack = CheckpointAcknowledged(source="binder/t", emitted_at=T0, cluster=C, request_id="r1", pod_uid="running",
                                 namespace="a", status=CheckpointStatus.COMPLETED, acknowledged_at=T0)
    log.on_event(req, "binder.checkpoint.requested.v1")
    log.on_event(ack, "binder.checkpoint.acknowledged.v1")
    log.on_event(msgspec.structs.replace(req, cluster="elsewhere"), "binder.checkpoint.requested.v1")
    assert log.recorded["binder.checkpoint.requested.v1"] == 1 and log.recorded["binder.checkpoint.acknowledged.v1"] == 1
    assert log.state == states and req not in log.binder_events


def test_replay_tracks_gpus_and_counts_fractions_on_shared_gpus() -> None:
    log = feed(RunLog(C), pending("a", 0, milli=500), bound("a", 1, slices(("g0", 500))),
               pending("b", 0, milli=300), bound("b", 2, slices(("g0", 300))),
               pending("c", 0, milli=300), bound("c", 3, slices(("g1", 300))),
               preempted("a", 4), finished("b", 5, 2))
    ledger, shared, fractional = log.replay({"g0": 0, "g1": 0})
    assert (shared, fractional) == (1, 3)  # b joined a on g0; a and c each had a GPU to themselves
    # asked: 500 -> 800 -> 1100 -> 600 (a preempted) -> 300 (b finished), over 2 GPUs = 2000 milli
    assert [s.allocated for s in ledger.samples] == pytest.approx([0.25, 0.4, 0.55, 0.3, 0.15])
    assert ledger.holding() == {"c": (("g1", 300, 0),)}


def test_replay_catches_an_over_allocated_gpu() -> None:
    log = feed(RunLog(C), pending("a", 0), bound("a", 1, slices(("g0", 1000))),
               pending("b", 0, milli=500), bound("b", 2, slices(("g0", 500))))
    ledger, _, _ = log.replay({"g0": 0})
    assert [(v.gpu, v.milli, v.pod) for v in ledger.violations] == [("g0", 1500, "b")]


def test_replay_follows_the_world_clock_when_a_release_reaches_the_stream_late() -> None:
    # b was bound at t=5 on the GPU a gave back at t=4; a's event was published after b's
    log = feed(RunLog(C), pending("a", 0), bound("a", 1, slices(("g0", 1000))),
               pending("b", 0), bound("b", 5, slices(("g0", 1000))), preempted("a", 4))
    ledger, _, _ = log.replay({"g0": 0})
    assert ledger.violations == [] and ledger.holding() == {"b": (("g0", 1000, 0),)}
    # bound while a still held it (a left at t=6): caught
    log = feed(RunLog(C), pending("a", 0), bound("a", 1, slices(("g0", 1000))),
               pending("b", 0), bound("b", 5, slices(("g0", 1000))), preempted("a", 6))
    ledger, _, _ = log.replay({"g0": 0})
    assert [(v.gpu, v.milli, v.pod) for v in ledger.violations] == [("g0", 2000, "b")]


def test_workload_fingerprint_compares_requests_not_outcomes() -> None:
    a = feed(RunLog(C), pending("p", 0), pending("q", 10, milli=250))
    b = feed(RunLog(C), pending("q", 10, milli=250), pending("p", 0), bound("p", 5, slices(("g0", 1000))))
    c = feed(RunLog(C), pending("p", 0), pending("q", 10, milli=500))
    assert a.workload_fingerprint()[0] == b.workload_fingerprint()[0] != c.workload_fingerprint()[0]


def _cfg(tmp_path: Path) -> DemoConfig:
    return DemoConfig(out=tmp_path, run_id="demo-x", duration_s=10, window_s=200.0, speed=20.0, trace="generator",
                      nodes="4", default_nodes=16, load=1.0, seed=1, max_pods=0, slo_s=30.0)


def _result(label: str, log: RunLog) -> RunResult:
    return RunResult(spec=RunSpec(label, "P", C), log=log, gpus={"g0": 0, "g1": 0}, nodes=1, started_at=T0,
                     virtual_end=T0 + 200, wall_s=1.0, reached_end=True,
                     messages={"binder.pod.pending.v1": 2, "placement.pod.decided.v1": 2, "binder.pod.bound.v1": 2},
                     db={"placement.pod.decided.v1": 2}, snapshot_violations=[], snapshot_pods=1, exit_codes={},
                     services={})


def test_analysis_and_comparison_of_two_runs(tmp_path: Path) -> None:
    workload = {"p": SimPod("p", "p", "a", 0.0, 100.0, klass=PodClass.INFERENCE, num_gpu=1, gpu_milli=1000),
                "q": SimPod("q", "q", "a", 10.0, 100.0, klass=PodClass.TRAINING, num_gpu=1, gpu_milli=500)}
    good = feed(RunLog(C), pending("p", 0), pending("q", 10, milli=500), decided("p"), decided("q"),
                bound("p", 5, slices(("g0", 1000))), bound("q", 10, slices(("g1", 500))), finished("p", 105, 5))
    poor = feed(RunLog(C), pending("p", 0), pending("q", 10, milli=500), decided("p"),
                bound("p", 50, slices(("g0", 1000))), unschedulable("q", "insufficient_gpu"))
    cfg = _cfg(tmp_path)
    a, b = analyse(_result("gpuaware", good), cfg, workload), analyse(_result("baseline", poor), cfg, workload)
    # good: p holds 1000 on [5, 105), q 500 on [10, 200): (1000*100 + 500*190) / (2000 * 200) = 0.4875
    assert a["allocation"]["mean"] == pytest.approx(0.4875)
    # poor: p holds 1000 on [50, 200): 1000 * 150 / 400000 = 0.375
    assert b["allocation"]["mean"] == pytest.approx(0.375)
    assert a["queue_delay_s"]["by_class"]["inference"]["p50"] == 5.0  # bound 5 s after arrival
    assert b["queue_delay_s"]["by_class"]["training"]["waiting"] == 1.0
    assert a["slo"]["met"] == 1 and b["slo"]["met"] == 0  # 5 s <= 30 s; 50 s > 30 s
    assert b["pods"]["pending_reasons"] == {"insufficient_gpu": 1} and b["pods"]["unaccounted_count"] == 0
    assert [r.klass for r in pod_records(_result("x", good), workload)] == ["inference", "training"]
    cmp_ = compare(_result("gpuaware", good), _result("baseline", poor), a, b)
    assert cmp_["same_workload"] and cmp_["gpuaware_beats_baseline"]
    assert cmp_["allocation_gain_pct"] == pytest.approx(30.0)  # 0.4875 / 0.375 - 1
    full = {r["label"]: r.pop("series") for r in (a, b)}
    plots = write_plots(tmp_path, [a, b], full)
    assert {p.name for p in plots} >= {"allocation.png", "queue_delay.png", "fairness.png"}
    report = {"summary": "s", "invariants": {"x": True}, "runs": {"gpuaware": a, "baseline": b},
              "services": {"binder": "took part"}}
    write_html(tmp_path / "report.html", report, plots)
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(plots) and "gpuaware vs stock Kubernetes" in page


def test_service_env_isolates_each_run_by_cluster(tmp_path: Path) -> None:
    env = service_env(_cfg(tmp_path), RunSpec("baseline", "KubeDefault", "demo-x-baseline"), "nats://n", "pg://d")
    assert env["placement"]["GPUAWARE_PLACEMENT_POLICY"] == "KubeDefault"
    assert env["placement"]["GPUAWARE_PLACEMENT_CLUSTER"] == env["binder"]["GPUAWARE_BINDER_CLUSTER"] == \
        "demo-x-baseline"
    assert env["binder"]["GPUAWARE_BINDER_DURABLE"] == "binder-demo-x-baseline"
    assert env["binder"]["GPUAWARE_BINDER_TWIN_DEFAULT_NODES"] == "4"
    assert env["binder"]["GPUAWARE_BINDER_START"] == str(VIRTUAL_EPOCH)
    assert env["placement"]["GPUAWARE_PLACEMENT_PREEMPTION"] == "false"  # stock Kubernetes: no preemption
    # the recorder stores this run's cluster only, through its own durables (deleted with the run's)
    assert env["recorder"]["GPUAWARE_RECORDER_CLUSTER"] == "demo-x-baseline"
    assert env["placement"]["GPUAWARE_PLACEMENT_FORECAST_HEADROOM"] == "false"
    ours = service_env(_cfg(tmp_path), RunSpec("gpuaware", "GpuAware", "demo-x-gpuaware"), "nats://n", "pg://d")
    assert ours["placement"]["GPUAWARE_PLACEMENT_PREEMPTION"] == "true"
    assert ours["placement"]["GPUAWARE_PLACEMENT_FORECAST_HEADROOM"] == "true"


def test_the_forecast_ab_run_is_gpuaware_without_its_forecasts(tmp_path: Path) -> None:
    from gpuaware.cli.demo import run_specs

    cfg = dataclasses.replace(_cfg(tmp_path), forecast_ab=True)
    specs = run_specs(cfg)
    assert [s.label for s in specs] == ["gpuaware", "baseline", NO_FORECASTS]
    assert [s.label for s in run_specs(dataclasses.replace(cfg, forecast_ab=False))] == ["gpuaware", "baseline"]
    ours, ab = service_env(cfg, specs[0], "nats://n", "pg://d"), service_env(cfg, specs[2], "nats://n", "pg://d")
    assert specs[2].policy == specs[0].policy and specs[2].ours and not specs[2].forecasts
    for key in ("GPUAWARE_PLACEMENT_PREEMPTION", "GPUAWARE_PLACEMENT_QUEUE_ORDER", "GPUAWARE_PLACEMENT_SEED"):
        assert ab["placement"][key] == ours["placement"][key], key  # the same gpuaware ...
    assert ab["binder"]["GPUAWARE_BINDER_SEED"] == ours["binder"]["GPUAWARE_BINDER_SEED"]  # ... the same workload
    assert ab["placement"]["GPUAWARE_PLACEMENT_FORECAST_HEADROOM"] == "false"  # ... without the forecasts
    assert ab["placement"]["GPUAWARE_PLACEMENT_CLUSTER"] == f"{cfg.run_id}-{NO_FORECASTS}"


def _ab_figures(p99: float | None, allocation: float) -> dict:
    return {"queue_delay_s": {"latency_sensitive": {"n": 40.0, "p50": 1.0, "p99": p99, "mean": 2.0}},
            "allocation": {"mean": allocation}}


def test_forecast_ab_judges_the_p99_ratio_and_the_allocation_together() -> None:
    met = forecast_ab(_ab_figures(60.0, 0.80), _ab_figures(100.0, 0.81))
    assert met["p99_ratio"] == 0.6 and met["allocation_pp"] == -1.0 and met["met"] is True
    costly = forecast_ab(_ab_figures(60.0, 0.75), _ab_figures(100.0, 0.81))  # 6 pp of allocation given up
    assert costly["allocation_pp"] == -6.0 and costly["met"] is False
    slow = forecast_ab(_ab_figures(90.0, 0.81), _ab_figures(100.0, 0.81))
    assert slow["p99_ratio"] == 0.9 and slow["met"] is False
    unknown = forecast_ab(_ab_figures(None, 0.81), _ab_figures(100.0, 0.81))
    assert unknown["p99_ratio"] is None and unknown["met"] is None


def test_each_service_gets_only_its_own_database_login(tmp_path: Path) -> None:
    own = {p.name: f"postgresql://{p.database_login}:pw@127.0.0.1:5432/gpuaware" for p in PROCESSES if p.database_role}
    cfg = dataclasses.replace(_cfg(tmp_path), database_urls=own)
    env = service_env(cfg, RunSpec("gpuaware", "GpuAware", "demo-x-gpuaware"), "nats://n", "postgresql://owner@h/db")
    by_process = {"binder": "binder", "placement": "placement", "agent": "telemetry-agent",
                  "health": "health-scoring", "quota": "quota", "forecasting": "forecasting"}
    for key, name in by_process.items():
        if process_named(name).database_role:
            assert env[key]["DATABASE_URL"] == own[name], name
        else:
            assert "DATABASE_URL" not in env[key], name  # never the owner's, never another's
    shared = service_env(_cfg(tmp_path), RunSpec("gpuaware", "GpuAware", "demo-x-gpuaware"), "nats://n", "pg://d")
    assert shared["quota"]["DATABASE_URL"] == "pg://d" and "DATABASE_URL" not in shared["binder"]


def test_the_processes_started_are_named_by_the_list(tmp_path: Path) -> None:
    assert listed_process(service_command("gpuaware.services.telemetry", "agent")) == "telemetry-agent"
    assert listed_process(service_command("gpuaware.services.telemetry", "collector")) == "telemetry-collector"
    assert listed_process(service_command("gpuaware.services.placement")) == "placement"
    assert listed_process([sys.executable, "-c", "print(1)"]) is None
    with ProcessGroup() as group:
        group.start("other", [sys.executable, "-c", "pass"], {}, tmp_path / "other.log")
        for _ in range(2):  # the provisioning with nothing to do: it exits at once
            group.start("provision", service_command("gpuaware.services.provision"),
                        {"GPUAWARE_PROVISION_STREAMS": "false", "DATABASE_URL": ""}, tmp_path / "provision.log")
    assert group.started == ["provision"]


def test_service_processes_stop_with_sigterm_and_log_to_files(tmp_path: Path) -> None:
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('draining', flush=True), sys.exit(0)))\n"
            "print('rea' + 'dy', flush=True)\n"
            "time.sleep(60)\n")
    with ProcessGroup() as group:
        p = group.start("sleeper", [sys.executable, "-c", code], {"X": "1"}, tmp_path / "logs" / "sleeper.log")
        deadline = time.monotonic() + 10
        while "ready" not in p.log_tail() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.alive()
    assert p.exit_code == 0 and "draining" in p.log_tail()
    assert service_built("gpuaware.services.binder") and not service_built("gpuaware.services.no_such_service")
    assert service_command("m", "a")[1:] == ["-m", "m", "a"]


def test_the_demo_reads_placements_forecast_counters_from_their_metrics_and_says_what_they_changed() -> None:
    # what placement's metrics source exports (rendered as Prometheus serves it), two instances summed
    from types import SimpleNamespace

    from prometheus_client import generate_latest

    from gpuaware.cli.demo_forecast import effect_line, placement_forecast_effect
    from gpuaware.placement import ForecastHeadroom, SignalEffect
    from gpuaware.runtime.metrics import ServiceMetrics
    from gpuaware.services.placement.metrics import placement_samples

    def text(scored: int, changed: int, gpu_changed: int, held_back: int = 0) -> str:
        summary = {"pods": {"pending": 1}, "gpu_milli_used": 0, "gpu_milli_total": 8000,
                   "counters": {"decided": scored, "unschedulable": 0, "victims_planned": 0, "fair_reclaims": 0}}
        effect = SignalEffect("forecast", scored=scored, changed=changed, gpu_changed=gpu_changed)
        headroom = ForecastHeadroom(frozenset({"interactive"}))
        headroom.held_back = held_back
        service = SimpleNamespace(leading=True, state=SimpleNamespace(summary=lambda: summary),
                                  durations=SimpleNamespace(answered=0), forecast_effect=effect, headroom=headroom)
        metrics = ServiceMetrics("placement", "test", "c", "p1")
        metrics.source(lambda: placement_samples(service))
        return generate_latest(metrics.registry).decode()

    effect = placement_forecast_effect([text(300, 4, 11, 6), text(155, 1, 7, 3)])
    assert effect == {"scored": 455, "changed": 5, "gpu_changed": 18, "headroom_held_back": 9, "instances": 2}
    line = effect_line(effect, {})
    assert "455 decisions" in line and "node of 5" in line and "GPUs of 18" in line and "held back 9" in line
    none = placement_forecast_effect([text(0, 0, 0)])
    assert "no decision was made while per-GPU forecasts existed (0 utilisation windows" in effect_line(
        none, {"windows": 0})
    assert effect_line(placement_forecast_effect([]), {}) == "placement's forecast counters unread"
