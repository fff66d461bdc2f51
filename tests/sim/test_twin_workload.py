"""Workload sources for the twin: the generator is deterministic by seed and sized to the cluster,
openb windows keep the pods alive in them with the rest of their life, Philly jobs become tenants'
gangs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaware.placement import PodRequest
from gpuaware.sim.traces import TraceError, TracePod
from gpuaware.sim.workload_gen import (
    GeneratorSpec,
    PodClass,
    SimPod,
    generate,
    spec_for_cluster,
)
from gpuaware.sim.workload_traces import from_openb, load_philly


def test_generator_is_deterministic_by_seed() -> None:
    spec = GeneratorSpec(duration_s=6 * 3600, rate_per_hour=60)
    a, b, c = generate(spec, seed=1), generate(spec, seed=1), generate(spec, seed=2)
    assert a == b and a != c
    assert len({p.uid for p in a}) == len(a)
    assert [p.arrival_s for p in a] == sorted(p.arrival_s for p in a)


def test_generator_mixes_tenants_classes_fractions_and_gangs() -> None:
    pods = generate(GeneratorSpec(duration_s=3 * 86400, rate_per_hour=80), seed=5)
    classes = {p.klass for p in pods}
    assert classes == {PodClass.TRAINING, PodClass.INFERENCE, PodClass.INTERACTIVE}
    assert {p.queue for p in pods} == {"team-vision", "team-nlp", "team-recsys", "research"}
    assert any(0 < p.gpu_milli < 1000 for p in pods if p.klass is PodClass.INFERENCE)
    assert all(p.gpu_milli < 1000 and p.num_gpu == 1 for p in pods if p.klass is PodClass.INTERACTIVE)
    inference = [p.priority for p in pods if p.klass is PodClass.INFERENCE]
    training = [p.priority for p in pods if p.klass is PodClass.TRAINING]
    assert min(inference) > max(training)
    assert any(p.checkpointable for p in pods if p.klass is PodClass.TRAINING)
    gangs: dict[str, list[SimPod]] = {}
    for p in pods:
        if p.gang_id:
            gangs.setdefault(p.gang_id, []).append(p)
    fixed = {g: members for g, members in gangs.items() if not members[0].elastic}
    assert fixed, "16-GPU training jobs become gangs of two 8-GPU pods"
    for members in fixed.values():
        assert len(members) == members[0].gang_min_members and sum(m.num_gpu for m in members) == 16
    for members in gangs.values():
        assert len({m.arrival_s for m in members}) == 1


def test_rate_is_sized_for_the_offered_load() -> None:
    # 400 GPUs at 0.8: rate * E[GPU-s per job] / 3600 = 320 GPUs busy on average
    spec = spec_for_cluster(400, load=0.8, duration_s=10 * 86400, diurnal_amplitude=0.0)
    pods = generate(spec, seed=3)
    offered = sum(p.gpu_milli_total / 1000 * (p.duration_s or 0) for p in pods) / spec.duration_s
    assert 0.6 * 320 < offered < 1.4 * 320


def test_type_constraints_are_cut_to_the_models_the_cluster_has() -> None:
    pods = generate(GeneratorSpec(duration_s=86400, rate_per_hour=200, available_models=("T4", "G2")), seed=1)
    assert all(set(p.gpu_types) <= {"T4", "G2"} for p in pods)
    assert any(p.gpu_types == ("T4",) for p in pods)


def trace_pod(name: str, created: float | None, deleted: float | None, gpus: int = 1) -> TracePod:
    return TracePod(PodRequest(name, 4000, 8192, gpus, 1000 if gpus else 0, qos="LS"), created, deleted)


def test_openb_window_keeps_what_lives_in_it() -> None:
    pods = [
        trace_pod("before-gone", 0, 900),          # deleted before the window [1000, 2000): out
        trace_pod("alive", 500, 1600),             # arrives at 0 with 600 s left
        trace_pod("forever", 200, None),           # never deleted: runs past the end
        trace_pod("inside", 1200, 1500),           # arrives at +200, lives 300 s
        trace_pod("after", 2000, 2500),            # created at the window's end: out
        trace_pod("cpu", 1100, 1200, gpus=0),
    ]
    got = {p.uid: (p.arrival_s, p.duration_s, p.klass) for p in from_openb(pods, window_start=1000, window_s=1000)}
    assert got == {"alive": (0.0, 600.0, PodClass.INFERENCE), "forever": (0.0, None, PodClass.INFERENCE),
                   "inside": (200.0, 300.0, PodClass.INFERENCE), "cpu": (100.0, 100.0, PodClass.BATCH)}
    assert "cpu" not in {p.uid for p in from_openb(pods, window_start=1000, window_s=1000, gpu_only=True)}


def test_philly_jobs_become_tenant_gangs(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                     "2017-10-01 00:00:00,600.0,1,600.0,vcA\n"
                     "2017-10-01 00:10:00,3600.0,12,43200.0,vcB\n"
                     "2017-10-02 00:00:01,60.0,2,120.0,vcA\n")
    pods = load_philly(trace, window_s=86400)
    # the third job is 86401 s after the first: outside a one-day window
    assert [(p.queue, p.num_gpu, p.arrival_s, p.gang_id is not None) for p in pods] == [
        ("vc-vcA", 1, 0.0, False), ("vc-vcB", 8, 600.0, True), ("vc-vcB", 4, 600.0, True)]
    assert pods[1].gang_min_members == 2 and pods[1].topology == "same-nvlink-island"
    assert all(p.klass is PodClass.TRAINING and p.checkpointable for p in pods)
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,-5,1,0,vc\n")
    with pytest.raises(TraceError, match=r"bad\.csv:2"):
        load_philly(bad)


def test_philly_trace_from_shared_data(shared_data: Path) -> None:
    pods = load_philly(shared_data / "pollux" / "traces" / "philly.csv", window_start=40 * 86400, window_s=86400)
    assert len(pods) > 500 and len({p.queue for p in pods}) > 3
