"""Requests validate on entry; the ledger reserves and unreserves idempotently and never over-commits."""

from __future__ import annotations

import pytest
from placement_helpers import node, share, whole

from gpuaware.placement import QUARANTINED, Cluster, NodeSpec, PodRequest, RequestError, ReserveError
from gpuaware.placement.model import CAPABILITIES


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(cpu_milli=-1), "cpu_milli is negative"),
        (dict(cpu_milli=1, memory_mib=-5), "memory_mib is negative"),
        (dict(cpu_milli=1, num_gpu=-1), "num_gpu is negative"),
        (dict(cpu_milli=1, num_gpu=0, gpu_milli=300), "without any GPU"),
        (dict(cpu_milli=1, num_gpu=1, gpu_milli=0), "gpu_milli must be in 1..1000"),
        (dict(cpu_milli=1, num_gpu=1, gpu_milli=1001), "gpu_milli must be in 1..1000"),
        (dict(cpu_milli=1, num_gpu=2, gpu_milli=500), "must take whole GPUs"),
        (dict(cpu_milli=1, capabilities=frozenset({"warp-drive"})), "unknown capabilities"),
        (dict(cpu_milli=1, topology="rack"), "unknown topology"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        PodRequest("bad", **kwargs)


@pytest.mark.parametrize(
    "pod, share_, total, tag, score_cpu",
    [
        # 1 GPU x 500 milli: a sharing pod, 500 milli in all, clustering label "share" (0)
        (PodRequest("a", 4000, 0, 1, 500), True, 500, 0, 4000),
        # 4 whole GPUs: 4 x 1000 = 4000 milli, label "4-gpu"
        (PodRequest("b", 8000, 0, 4, 1000), False, 4000, 4, 8000),
        # CPU-only asking 0 CPU: scored as kube-scheduler's non-zero default 100m, no label (-1)
        (PodRequest("c", 0, 0), False, 0, -1, 100),
    ],
)
def test_request_derived_fields(pod: PodRequest, share_: bool, total: int, tag: int, score_cpu: int) -> None:
    assert (pod.is_gpu_share, pod.total_gpu_milli, pod.affinity_tag, pod.score_cpu_milli) == (
        share_, total, tag, score_cpu)


def test_node_validation() -> None:
    with pytest.raises(RequestError, match="no GPU model"):
        NodeSpec("n", 1000, 1000, 2, "")
    with pytest.raises(RequestError, match="nvlink_islands has 1 entries for 2 GPUs"):
        NodeSpec("n", 1000, 1000, 2, "T4", nvlink_islands=(0,))
    with pytest.raises(RequestError, match="duplicate node"):
        Cluster([node("a"), node("a")])


def test_reserve_is_idempotent_and_unreserve_restores() -> None:
    c = Cluster([node("a", gpus=2, cpu=8000, mem=4096)])
    pod = share("p", milli=300, cpu=2000, mem=1024)
    first = c.reserve(pod, 0, (1,))
    again = c.reserve(pod, 0, (1,))  # same placement twice: a no-op
    assert first == again
    # 8000 - 2000 = 6000 CPU left; GPU 1: 1000 - 300 = 700 free
    assert (c.cpu_free[0], c.mem_free[0], c.gpu_free[0, 1], c.used_gpu_milli) == (6000, 3072, 700, 300)
    with pytest.raises(RequestError, match="already placed"):
        c.reserve(pod, 0, (0,))
    assert c.unreserve("p") == first
    assert c.unreserve("p") is None  # unknown pod: a no-op
    assert (c.cpu_free[0], c.gpu_free[0, 1], c.used_gpu_milli) == (8000, 1000, 0)
    c.check()


@pytest.mark.parametrize(
    "pod, gpus, error",
    [
        (share("big-cpu", cpu=9000), (0,), ReserveError),  # 9000 > 8000 CPU
        (share("big-mem", mem=5000), (0,), ReserveError),  # 5000 > 4096 MiB
        (whole("two", gpus=2), (0,), RequestError),  # asks 2 GPUs, given 1
        (whole("dup", gpus=2), (0, 0), RequestError),  # the same GPU twice
        (share("no-gpu-2"), (2,), ReserveError),  # the node has GPUs 0 and 1 only
    ],
)
def test_reserve_refuses_what_does_not_fit(pod: PodRequest, gpus: tuple[int, ...], error: type) -> None:
    c = Cluster([node("a", gpus=2, cpu=8000, mem=4096)])
    with pytest.raises(error):
        c.reserve(pod, 0, gpus)
    c.check()


def test_gpu_over_allocation_is_refused() -> None:
    c = Cluster([node("a", gpus=1)])
    c.reserve(share("x", milli=600), 0, (0,))
    with pytest.raises(ReserveError, match="too little free"):
        c.reserve(share("y", milli=500), 0, (0,))  # 600 + 500 > 1000
    c.check()


def test_quarantine_blocks_new_pods_and_versions_move() -> None:
    c = Cluster([node("a", gpus=2)])
    v0 = int(c.version[0])
    c.set_gpu_health(0, 0, QUARANTINED)
    assert c.gpu_free[0, 0] == 0 and c.version[0] == v0 + 1
    with pytest.raises(ReserveError):
        c.reserve(share("x"), 0, (0,))
    snap = c.snapshot()
    with pytest.raises(ValueError):
        snap.gpu_free[0, 1] = 5  # snapshots are read-only


@pytest.mark.parametrize("model, memory_mib, capabilities", [
    # the one GPU catalog (gpuaware.schemas.gpus): NVML's 81,920 MiB on a current driver, NVLink + MIG
    ("A100", 81920, {"tensor_cores", "nvlink", "mig"}),
    ("H100", 81559, {"tensor_cores", "fp8", "nvlink", "mig"}),
    ("T4", 15360, {"tensor_cores"}),
    ("V100M16", 16160, {"tensor_cores", "nvlink"}),  # FGD's figure: no current-driver one at hand
    ("G1", None, set()),  # openb's undisclosed type: memory unknown, nothing assumed
    ("X9000", None, set()),  # a model nobody knows: an ad-hoc record, nothing assumed
])
def test_cluster_models_come_from_the_gpu_catalog(model: str, memory_mib: int | None, capabilities: set) -> None:
    m = Cluster([NodeSpec("n", 1000, 1000, 1, model)]).models[0]
    assert (m.name, m.memory_mib) == (model, memory_mib)
    assert {c for c in CAPABILITIES if m.has(c)} == capabilities


def test_a_node_model_named_by_an_alias_gets_the_catalog_record_under_its_own_name() -> None:
    from gpuaware.placement import Cluster, NodeSpec

    c = Cluster([NodeSpec("a", 1000, 1000, 1, "NVIDIA A100-SXM4-80GB"), NodeSpec("b", 1000, 1000, 1, "no-such-gpu")])
    known, unknown = c.models  # sorted by name
    assert known.name == "NVIDIA A100-SXM4-80GB" and known.memory_mib == 81920 and known.mig
    assert unknown.name == "no-such-gpu" and unknown.memory_mib is None and not unknown.tensor_cores
