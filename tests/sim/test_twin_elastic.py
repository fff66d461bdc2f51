"""An elastic job in the twin: its workers share one job's work (its duration at full width), it
runs faster with more of them,
each resize costs it the restart delay and no work (when it checkpointed), work since the last
checkpoint is lost otherwise, and it finishes exactly once - bound workers finish, pending ones are
withdrawn. A fixed gang keeps one duration per pod."""

from __future__ import annotations

import math

import pytest

from gpuaware.placement import NodeSpec
from gpuaware.sim import StepTimeParams, ThroughputModel
from gpuaware.sim.twin import (
    RESIZE_RESTART_DELAY_S,
    Finished,
    JobRate,
    Slice,
    Twin,
    TwinEvent,
    Withdrawn,
    linear_rate,
    throughput_rate,
)
from gpuaware.sim.workload_gen import SimPod

T0 = 1_767_225_600.0
NODES = (NodeSpec("n1", 64_000, 262_144, 4, "A100"), NodeSpec("n2", 64_000, 262_144, 4, "A100"))
WORK = 1000.0
"""an elastic job's time at full width (4 workers)"""
DELAY = RESIZE_RESTART_DELAY_S


def pace(n: int) -> float:
    """the default linear rate of a job of at most 4 workers"""
    return n / 4


def workers(job: str, count: int = 4, *, low: int = 1, high: int = 4, dur: float | None = WORK,
            ckpt: bool = True) -> list[SimPod]:
    return [SimPod(uid=f"{job}-{i}", name=f"{job}-{i}", namespace="t", arrival_s=0.0, duration_s=dur,
                   cpu_milli=1000, memory_mib=1024, num_gpu=1, checkpointable=ckpt, gang_id=job,
                   gang_min_members=low, gang_max_members=high) for i in range(count)]


def twin_of(*pods: SimPod, job_rate: JobRate = linear_rate) -> Twin:
    twin = Twin(NODES, pods, start=T0, seed=5, fleet=False, job_rate=job_rate)
    twin.advance(T0)
    return twin


class Driver:
    """Binds each pod on its own GPU and records every event, at virtual seconds after T0."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.events: list[TwinEvent] = []
        self._free = [(n, g.uuid) for n in twin.nodes for g in twin.node_gpus[n]]
        self._gpu: dict[str, tuple[str, str]] = {}

    def at(self, t: float) -> None:
        self.events += self.twin.advance(T0 + t)

    def bind(self, uid: str) -> None:
        node, gpu = self._gpu.get(uid) or self._free.pop(0)
        self._gpu[uid] = (node, gpu)
        self.twin.bind(uid, node, [Slice(gpu, 1000)])

    def run_out(self) -> None:
        while (nxt := self.twin.next_event_at()) is not None:
            self.events += self.twin.advance(nxt)

    def ends(self) -> dict[str, tuple[str, float]]:
        out: dict[str, tuple[str, float]] = {}
        for e in self.events:
            if isinstance(e, Finished):
                assert e.binding.pod.uid not in out, "a worker finished twice"
                out[e.binding.pod.uid] = ("finished", e.at - T0)
            elif isinstance(e, Withdrawn):
                assert e.pod.uid not in out, "a worker withdrawn twice"
                out[e.pod.uid] = ("withdrawn", e.at - T0)
        return out


def test_four_workers_finish_the_work_faster_than_one() -> None:
    twin = twin_of(*workers("solo"), *workers("wide"))
    d = Driver(twin)
    d.bind("solo-0")
    for i in range(4):
        d.bind(f"wide-{i}")  # the first starts the job, the next three grow it at the same instant
    d.run_out()
    ends = d.ends()
    # four workers: its time at full width, after one restart; one worker: four times as long
    assert [ends[f"wide-{i}"] for i in range(4)] == [("finished", pytest.approx(DELAY + WORK))] * 4
    assert ends["solo-0"] == ("finished", pytest.approx(WORK / pace(1)))
    wide = twin.elastic_job("wide-0")
    assert wide is not None and (wide.grows, wide.shrinks, wide.lost_s) == (1, 0, 0.0)  # three joins at one
    assert wide.restart_s == pytest.approx(DELAY)                                         # instant: one restart
    assert {ends[f"solo-{i}"][0] for i in range(1, 4)} == {"withdrawn"}
    twin.check()


def test_each_resize_costs_the_restart_delay_and_no_work_and_the_job_finishes_once() -> None:
    twin = twin_of(*workers("job"))
    d = Driver(twin)
    d.bind("job-0")                     # t=0: runs with 1 worker
    d.at(100)
    d.bind("job-1")                     # t=100: grow to 2, restarts until 130
    d.at(200)
    d.bind("job-2")                     # t=200: grow to 3, restarts until 230
    d.at(300)
    twin.evict("job-2", checkpointed=True)   # t=300: shrink to 2, restarts until 330
    job = twin.elastic_job("job-0")
    assert job is not None
    assert (job.grows, job.shrinks, job.resizes) == (2, 1, 3)
    done = 100 * pace(1) + (100 - DELAY) * pace(2) + (100 - DELAY) * pace(3)
    assert job.done_s == pytest.approx(done) and job.lost_s == 0.0
    d.run_out()
    end = 300 + DELAY + (WORK - done) / pace(2)   # the rest with 2 workers
    ends = d.ends()
    assert ends == {"job-0": ("finished", pytest.approx(end)), "job-1": ("finished", pytest.approx(end)),
                    "job-2": ("withdrawn", pytest.approx(end)), "job-3": ("withdrawn", pytest.approx(end))}
    # exactly one restart delay per resize, no work thrown away: all the work was done at the
    # worker counts it ran at, in the time left after the three restarts
    assert job.restart_s == pytest.approx(3 * DELAY) and job.lost_s == 0.0
    assert job.done_s == pytest.approx(WORK)
    assert twin.next_event_at() is None and twin.counts()["finished"] == 4
    twin.check()


def test_a_shrink_without_a_checkpoint_loses_the_work_since_the_last_one() -> None:
    twin = twin_of(*workers("job", 2))
    d = Driver(twin)
    d.bind("job-0")
    d.bind("job-1")                     # t=0: grow to 2, progress 0 saved, restarts until 30
    d.at(100)
    eviction = twin.evict("job-1", checkpointed=False)   # 70 s at 2 workers done, none of it saved
    job = twin.elastic_job("job-0")
    assert job is not None and job.shrinks == 1
    assert eviction.lost_work_s == pytest.approx(70 * pace(2)) and job.lost_s == pytest.approx(70 * pace(2))
    assert job.done_s == 0.0
    d.run_out()
    assert d.ends()["job-0"] == ("finished", pytest.approx(100 + DELAY + WORK / pace(1)))


def test_a_completed_checkpoint_answer_saves_the_jobs_progress() -> None:
    twin = Twin(NODES, workers("job", 2), start=T0, seed=5, fleet=False, checkpoint_delay_s=(5.0, 5.0))
    twin.advance(T0)
    d = Driver(twin)
    d.bind("job-0")
    d.bind("job-1")
    d.at(100)
    twin.request_checkpoint("job-0", "r-1")   # answered at 105: the progress until then is saved
    d.at(110)
    assert twin.evict("job-1", checkpointed=False).lost_work_s == pytest.approx(5 * pace(2))


def test_below_its_minimum_the_job_waits_and_a_stop_is_no_resize() -> None:
    twin = twin_of(*workers("job", 3, low=2, high=3))
    d = Driver(twin)
    d.bind("job-0")
    d.at(50)
    job = twin.elastic_job("job-0")
    assert job is not None and job.done_s == 0.0 and twin.next_event_at() is None  # waits for a second
    d.bind("job-1")                     # t=50: the job starts at its minimum, no restart
    d.at(150)
    twin.evict("job-1", checkpointed=True)   # t=150: below the minimum: stopped, its progress saved
    assert job.done_s == pytest.approx(100 * 2 / 3)
    d.at(200)
    d.bind("job-1")                     # t=200: starts again where it stopped
    d.run_out()
    assert (job.grows, job.shrinks, job.restart_s, job.lost_s) == (0, 0, 0.0, 0.0)
    assert d.ends()["job-0"] == ("finished", pytest.approx(200 + (WORK - 100 * 2 / 3) * 3 / 2))


def test_the_rate_is_injectable() -> None:
    def sqrt_rate(pod: SimPod, placement: tuple[int, ...]) -> float:
        return math.sqrt(sum(placement) / pod.gang_max_members)

    twin = twin_of(*workers("job"), job_rate=sqrt_rate)
    d = Driver(twin)
    d.bind("job-0")
    d.run_out()
    assert d.ends()["job-0"] == ("finished", pytest.approx(WORK / math.sqrt(1 / 4)))
    assert linear_rate(workers("x", 1, low=2)[0], (2, 1)) == pytest.approx(3 / 4)


MODEL = ThroughputModel("toy", StepTimeParams(alpha_c=0.05, beta_c=0.002, alpha_r=0.02, beta_r=0.005, alpha_n=0.2,
                                              beta_n=0.05, gamma=1.0), max_local_batch=256)


def test_a_throughput_model_paces_the_job_by_its_placement() -> None:
    rate = throughput_rate(lambda pod: (MODEL, 512) if pod.gang_id == "job" else None, gpus_per_node=4)
    pod = workers("job", 1)[0]
    assert rate(pod, (4,)) == pytest.approx(1.0)          # full width, packed: the duration's own layout
    assert 0 < rate(pod, (1,)) < rate(pod, (2,)) < rate(pod, (4,))
    assert rate(pod, (1, 1)) < rate(pod, (2,))            # across nodes: the all-reduce costs more
    other = workers("other", 1)[0]
    assert rate(other, (2,)) == linear_rate(other, (2,))   # no model: linear

    twin = twin_of(*workers("job"), job_rate=rate)
    n1, n2 = (twin.node_gpus[n] for n in ("n1", "n2"))
    twin.bind("job-0", "n1", [Slice(n1[0].uuid, 1000)])
    twin.bind("job-1", "n2", [Slice(n2[0].uuid, 1000)])   # spread: (1, 1)
    job = twin.elastic_job("job-0")
    assert job is not None and job.placement() == (1, 1) and job.speed() == pytest.approx(rate(pod, (1, 1)))
    twin.evict("job-1", checkpointed=True)
    twin.bind("job-1", "n1", [Slice(n1[1].uuid, 1000)])   # packed: (2,)
    assert job.placement() == (2,) and job.speed() == pytest.approx(rate(pod, (2,)))


def test_a_fixed_gang_keeps_one_duration_per_pod() -> None:
    pods = [SimPod(uid=f"g-{i}", name=f"g-{i}", namespace="t", arrival_s=0.0, duration_s=100.0 * (i + 1),
                   num_gpu=1, gang_id="g", gang_min_members=2, gang_max_members=2) for i in range(2)]
    twin = twin_of(*pods)
    assert twin.elastic_job("g-0") is None
    d = Driver(twin)
    d.bind("g-0")
    d.bind("g-1")
    d.run_out()
    assert d.ends() == {"g-0": ("finished", pytest.approx(100.0)), "g-1": ("finished", pytest.approx(200.0))}


def test_workers_leaving_at_one_instant_are_one_shrink() -> None:
    twin = twin_of(*workers("job"))
    d = Driver(twin)
    for i in range(4):
        d.bind(f"job-{i}")
    d.at(100)
    twin.evict("job-3", checkpointed=True)
    twin.evict("job-2", checkpointed=True)
    job = twin.elastic_job("job-0")
    assert job is not None and (job.grows, job.shrinks, job.workers) == (1, 1, 2)
    assert job.restart_s == pytest.approx(2 * DELAY)
