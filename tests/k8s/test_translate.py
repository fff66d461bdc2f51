"""Pod / Node -> PodPending / NodeInventory on the recorded payloads, one rule per case."""

from __future__ import annotations

import copy

import pytest
import yaml
from k8s_payloads import load, node, pod, shared

from gpuaware.k8s.nodes import hami_devices, node_inventory
from gpuaware.k8s.translate import (
    ANNOTATION,
    HAMI_REGISTER,
    TranslationError,
    is_ours,
    pod_pending,
)
from gpuaware.schemas.inventory import MigMode
from gpuaware.schemas.pods import QosClass, TopologyPreference


def test_recorded_pod_is_two_whole_gpus_with_nothing_else_asked() -> None:
    p = load("extender/object-pod-pending.json")
    e = pod_pending(p, source="binder/k8s", cluster="c")
    # nvidia.com/gpu: 2 -> num_gpu 2, whole GPUs; cpu 16 -> 16000 m; 128Gi -> 131072 MiB
    assert (e.num_gpu, e.gpu_milli, e.gpu_memory_mib, e.mig_profile) == (2, 1000, 0, None)
    assert (e.cpu_milli, e.memory_mib) == (16000, 131072)
    assert (e.pod_uid, e.pod_name, e.namespace) == ("3f1c9a52-6d0e-4b8a-9b7e-2a51c0d4e8f1", "llm-train-7f9c4-0",
                                                    "ml-team-a")
    assert e.gpu_types == () and e.queue == "default" and e.topology == TopologyPreference.NONE
    assert e.submitted_at == 1773480067.0  # 2026-03-14T09:21:07Z
    assert e.qos == QosClass.GUARANTEED  # status.qosClass of the recorded pod


def test_hami_fraction_and_gpu_type() -> None:
    # HAMi: gpucores 30 % -> 300 milli; gpumem 10000 MiB; one GPU; use-gputype narrows the models
    p = pod(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "10000"})
    p["metadata"]["annotations"]["nvidia.com/use-gputype"] = "A100, H100"
    e = pod_pending(p, source="t")
    assert (e.num_gpu, e.gpu_milli, e.gpu_memory_mib, e.gpu_types) == (1, 300, 10000, ("A100", "H100"))


def test_hami_memory_percentage_alone_is_a_share() -> None:
    e = pod_pending(pod(**{"nvidia.com/gpumem-percentage": "25"}), source="t")
    assert (e.num_gpu, e.gpu_milli) == (1, 250)  # no nvidia.com/gpu: one shared GPU, 25 % of it


def test_mig_mixed_resource_is_one_instance() -> None:
    e = pod_pending(pod(**{"nvidia.com/mig-1g.10gb": "1"}), source="t")
    assert (e.num_gpu, e.mig_profile) == (1, "1g.10gb")
    with pytest.raises(TranslationError, match="only one MIG instance"):
        pod_pending(pod(**{"nvidia.com/mig-1g.10gb": "2"}), source="t")


def test_annotations_read_and_checked() -> None:
    p = pod(**{"nvidia.com/gpu": "4"})
    p["metadata"]["annotations"].update({
        ANNOTATION.QUEUE: "team-a", ANNOTATION.GANG: "job-1", ANNOTATION.GANG_MIN_MEMBERS: "4",
        ANNOTATION.TOPOLOGY: "same-nvlink-island", ANNOTATION.CHECKPOINTABLE: "true",
        ANNOTATION.CAPABILITIES: "fp8,nvlink", ANNOTATION.MIN_COMPUTE_CAPABILITY: "9.0",
        ANNOTATION.EXPECTED_DURATION_S: "3600"})
    e = pod_pending(p, source="t")
    assert (e.queue, e.gang_id, e.gang_min_members, e.topology) == ("team-a", "job-1", 4,
                                                                    TopologyPreference.SAME_NVLINK_ISLAND)
    assert e.checkpointable and e.capabilities.fp8 and e.capabilities.nvlink
    assert e.capabilities.min_compute_capability == "9.0" and e.expected_duration_s == 3600.0
    for key, bad, match in [(ANNOTATION.TOPOLOGY, "same-planet", "same-planet"),
                            (ANNOTATION.CHECKPOINTABLE, "maybe", "not true or false"),
                            (ANNOTATION.GANG_MIN_MEMBERS, "zero", "not an integer"),
                            (ANNOTATION.CAPABILITIES, "warp-drive", "unknown capability"),
                            (ANNOTATION.GPU_MILLI, "2000", "outside 1..1000")]:
        q = copy.deepcopy(p)
        q["metadata"]["annotations"][key] = bad
        with pytest.raises(TranslationError, match=match):
            pod_pending(q, source="t")


def test_pod_group_label_is_a_gang() -> None:
    p = pod(**{"nvidia.com/gpu": "8"})
    p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "llm-train"
    p["metadata"]["annotations"][ANNOTATION.GANG_MIN_MEMBERS] = "4"
    e = pod_pending(p, source="t")
    assert (e.gang_id, e.gang_min_members) == ("llm-train", 4)


def test_gpugang_spec_fills_what_the_pod_leaves_out() -> None:
    p = pod(**{"nvidia.com/gpu": "8"})
    p["metadata"]["annotations"][ANNOTATION.GANG] = "llm"
    gangs = {"llm": {"minMember": 4, "queue": "team-a", "topology": "same-nvlink-island"}}
    e = pod_pending(p, source="t", gangs=gangs)
    assert (e.gang_id, e.gang_min_members, e.queue, e.topology) == ("llm", 4, "team-a",
                                                                    TopologyPreference.SAME_NVLINK_ISLAND)
    p["metadata"]["annotations"][ANNOTATION.QUEUE] = "team-b"  # the pod's own word wins
    assert pod_pending(p, source="t", gangs=gangs).queue == "team-b"


def test_bad_quantities_and_fraction_of_many_gpus_are_refused() -> None:
    with pytest.raises(TranslationError, match="not a Kubernetes quantity"):
        pod_pending(pod(**{"nvidia.com/gpu": "two"}), source="t")
    with pytest.raises(TranslationError, match="gpu_milli"):
        pod_pending(pod(**{"nvidia.com/gpu": "2", "nvidia.com/gpucores": "50"}), source="t")
    with pytest.raises(TranslationError, match=r"metadata\.uid"):
        pod_pending({"metadata": {"name": "x"}}, source="t")


def test_init_containers_and_cpu_only_pod() -> None:
    p = pod()
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "32", "memory": "1Gi"}}}]
    e = pod_pending(p, source="t")
    # containers sum 4 cpu, init 32: the kubelet admits max(4, 32) = 32 cpu; memory max(16Gi, 1Gi)
    assert (e.num_gpu, e.cpu_milli, e.memory_mib) == (0, 32000, 16384)


def test_dra_claims_from_the_recorded_examples() -> None:
    docs = [d for d in yaml.safe_load_all(shared("gpu-sharing/dra-nvidia-gpu-examples.yaml").read_text()) if d]
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    pod1 = next(d for d in docs if d["kind"] == "Pod" and d["metadata"]["name"] == "pod1")
    pod1 = copy.deepcopy(pod1)
    pod1["metadata"]["uid"] = "u1"
    e = pod_pending(pod1, source="t", claims=templates)
    assert e.num_gpu == 1 and e.mig_profile is None  # one gpu.nvidia.com device
    # h100-or-mig asks a whole GPU and a MIG slice in one claim: not one pod request -> refused clearly
    pod1["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "h100-or-mig"
    with pytest.raises(TranslationError, match="MIG device through DRA"):
        pod_pending(pod1, source="t", claims=templates)
    pod1["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "missing"
    with pytest.raises(TranslationError, match="not known"):
        pod_pending(pod1, source="t", claims=templates)


def test_recorded_node_from_gfd_labels() -> None:
    inv = node_inventory(load("extender/object-node-dgx-a100.json"), source="binder/k8s", cluster="c")
    assert inv.node == "gpu-node-07" and len(inv.gpus) == 8
    g = inv.gpus[0]
    # NVIDIA-A100-SXM4-80GB -> NVML's "NVIDIA A100-SXM4-80GB"; gpu.memory 81920 MiB; compute 8.0
    assert (g.model, g.memory_mib, g.compute_capability, g.mig_mode) == ("NVIDIA A100-SXM4-80GB", 81920, "8.0",
                                                                        MigMode.DISABLED)
    assert inv.cpu_milli == 254000 and inv.memory_mib == 2102870848 // 1024
    assert inv.zone == "rack-12" and inv.driver_version == "550.90.07"


def test_time_slicing_replicas_are_divided_out() -> None:
    n = node("ts", gpus=32, **{"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED"})
    inv = node_inventory(n, source="t")
    assert len(inv.gpus) == 8 and inv.gpus[0].model == "NVIDIA A100-SXM4-80GB"  # 32 / 4 replicas


def test_hami_registration_gives_real_uuids() -> None:
    docs = yaml.safe_load(shared("hami/hami-annotations-example.yaml").read_text())
    raw = docs["node"]["metadata"]["annotations"][HAMI_REGISTER]
    n = node("hami-node")
    n["metadata"]["annotations"][HAMI_REGISTER] = raw
    inv = node_inventory(n, source="t")
    assert [(g.uuid, g.model, g.memory_mib, g.mig_mode) for g in inv.gpus] == [
        ("GPU-0", "NVIDIA-A100-SXM4-40GB", 40960, MigMode.ENABLED)]
    # the older text form the protocol doc still describes
    assert hami_devices("GPU-a,10,40960,100,NVIDIA-A100,0,true:GPU-b,10,40960,100,NVIDIA-A100,1,false:")[1] == {
        "id": "GPU-b", "index": 1, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100", "numa": 1,
        "health": False}
    n["metadata"]["annotations"][HAMI_REGISTER] = "[{broken"
    with pytest.raises(TranslationError, match="not JSON"):
        node_inventory(n, source="t")


def test_is_ours() -> None:
    p = load("extender/object-pod-pending.json")
    assert not is_ours(p)  # schedulerName gpu-scheduler
    p = copy.deepcopy(p)
    p["spec"]["schedulerName"] = "gpuaware"
    assert is_ours(p)
    p["spec"]["nodeName"] = "n1"
    assert not is_ours(p)
