"""The generator's elastic training jobs: a documented share of multi-GPU training jobs becomes a gang of
one-GPU workers running with half to all of them, the same per seed, and switched off by one setting
without moving any other pod."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpuaware.sim.workload_gen import (
    DEFAULT_CLASSES,
    ClassProfile,
    GeneratorSpec,
    PodClass,
    SimPod,
    elastic_range,
    generate,
    spec_for_cluster,
)

SPEC = GeneratorSpec(duration_s=2 * 86400, rate_per_hour=80)


def jobs(pods: tuple[SimPod, ...]) -> dict[str, list[SimPod]]:
    out: dict[str, list[SimPod]] = {}
    for p in pods:
        out.setdefault(p.gang_id or p.uid, []).append(p)
    return out


@pytest.mark.parametrize(("workers", "expected"), [(2, (1, 2)), (3, (2, 3)), (4, (2, 4)), (16, (8, 16))])
def test_an_elastic_job_runs_on_half_rounded_up_to_all_of_its_workers(workers: int, expected: tuple[int, int]) -> None:
    assert elastic_range(workers) == expected


def test_a_one_worker_job_cannot_be_elastic() -> None:
    with pytest.raises(ValueError, match="at least 2 workers"):
        elastic_range(1)


def test_half_of_the_multi_gpu_training_jobs_are_elastic_gangs_of_one_gpu_workers() -> None:
    pods = generate(SPEC, seed=3)
    training = {j: m for j, m in jobs(pods).items() if m[0].klass is PodClass.TRAINING}
    multi = {j: m for j, m in training.items() if sum(p.num_gpu for p in m) > 1}
    elastic = {j: m for j, m in multi.items() if m[0].elastic}
    assert 0.4 < len(elastic) / len(multi) < 0.6  # the profile's 0.5, drawn per job
    for members in elastic.values():
        width = len(members)
        assert all(p.num_gpu == 1 and p.gpu_milli == 1000 for p in members)
        assert {(p.gang_min_members, p.gang_max_members) for p in members} == {(math.ceil(width / 2), width)}
        assert len({(p.arrival_s, p.duration_s, p.queue, p.priority, p.checkpointable) for p in members}) == 1
        assert len({p.uid for p in members}) == width
    # single-GPU jobs and the other classes never are
    assert not any(p.elastic for j, m in jobs(pods).items() if j not in multi for p in m)
    assert all(p.gang_max_members == 0 for j, m in multi.items() if j not in elastic for p in m)


def test_elastic_jobs_are_the_same_for_a_seed_and_differ_between_seeds() -> None:
    a, b, c = generate(SPEC, seed=4), generate(SPEC, seed=4), generate(SPEC, seed=5)
    assert a == b and a != c
    assert any(p.elastic for p in a)


def test_turning_elastic_jobs_off_leaves_every_other_job_as_it_was() -> None:
    on = jobs(generate(SPEC, seed=6))
    off = jobs(generate(replace(SPEC, elastic=False), seed=6))
    assert not any(p.elastic for m in off.values() for p in m)
    assert on.keys() == off.keys()  # same jobs, same arrivals: only the elastic ones' shape differs
    changed = {j for j in on if on[j] != off[j]}
    assert changed == {j for j, m in on.items() if m[0].elastic}
    for j in changed:  # the same job at its fixed width
        assert sum(p.num_gpu for p in on[j]) == sum(p.num_gpu for p in off[j])
        assert on[j][0].arrival_s == off[j][0].arrival_s and on[j][0].duration_s == off[j][0].duration_s


def test_spec_for_cluster_passes_the_switch_and_offers_the_same_load() -> None:
    on, off = spec_for_cluster(64, load=1.0), spec_for_cluster(64, load=1.0, elastic=False)
    assert on.elastic and not off.elastic and on.rate_per_hour == off.rate_per_hour


def test_a_class_profile_refuses_an_elastic_share_outside_0_to_1() -> None:
    with pytest.raises(ValueError, match="elastic"):
        replace(DEFAULT_CLASSES[0], elastic=1.5)
    assert ClassProfile(PodClass.TRAINING, gpus=((4, 1.0),), elastic=1.0).elastic == 1.0


def test_a_pod_refuses_a_maximum_without_a_gang_or_below_its_minimum() -> None:
    with pytest.raises(ValueError, match="gang_max_members"):
        SimPod("p", "p", "ns", 0.0, 10.0, num_gpu=1, gang_max_members=2)
    with pytest.raises(ValueError, match="gang_max_members"):
        SimPod("p", "p", "ns", 0.0, 10.0, num_gpu=1, gang_id="g", gang_min_members=3, gang_max_members=2)
