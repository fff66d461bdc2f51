"""One valid, realistic instance of every message, for round-trip, evolution and schema tests.

`test_every_message_has_a_sample` fails when a message is registered without a sample here.
"""

from __future__ import annotations

import msgspec
import pytest

from gpuaware import schemas as s

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
EV = {"source": "test/0", "emitted_at": T0, "cluster": "default"}


def _gpu(i: int) -> s.GpuInfo:
    return s.GpuInfo(
        uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000",
        index=i,
        model="NVIDIA A100-SXM4-80GB",
        memory_mib=81920,
        pci_bus_id=f"00000000:{7 + i:02x}:00.0",
        compute_capability="8.0",
        tensor_cores=True,
        nvlink_links=12,
        nvlink_island="node-a/nvswitch",
        numa_node=i // 4,
        mig_mode=s.MigMode.ENABLED if i == 0 else s.MigMode.DISABLED,
        mig_profiles=(s.MigProfile(name="1g.10gb", profile_id=19, slices=1, memory_mib=9856, max_instances=7),),
        mig_instances=(
            s.MigInstance(uuid="MIG-0", profile="1g.10gb", gpu_instance_id=7, compute_instance_id=0,
                          memory_mib=9856, placement_start=0),
        ) if i == 0 else (),
    )


def _pending() -> s.PodPending:
    return s.PodPending(
        **EV, pod_uid="uid-1", pod_name="train-0", namespace="team-a", submitted_at=T0 - 5,
        cpu_milli=4000, memory_mib=16384, num_gpu=1, gpu_milli=500, gpu_memory_mib=20480,
        gpu_types=("A100-80GB", "H100-80GB"),
        capabilities=s.GpuCapabilities(tensor_cores=True, min_memory_mib=40960),
        gang_id="job-7", gang_min_members=4, topology=s.TopologyPreference.SAME_NVLINK_ISLAND,
        queue="team-a", priority=100, priority_class="high", checkpointable=True,
        qos=s.QosClass.GUARANTEED, expected_duration_s=3600.0,
    )


def _slice(i: int = 0) -> s.GpuSlice:
    return s.GpuSlice(gpu_uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", gpu_index=i, gpu_milli=500,
                      memory_mib=20480)


def _verdicts() -> tuple[s.NodeClassVerdict, ...]:
    return (
        s.NodeClassVerdict(node_class="8xA100-SXM4-80GB/nvswitch", nodes=10, feasible=2,
                           rejected={"insufficient_gpu": 8}, best_node="node-a", best_score=87.5),
        s.NodeClassVerdict(node_class="4xT4/pcie", nodes=4, rejected={"no_matching_gpu_type": 4}),
    )


def _explanation() -> s.Explanation:
    return s.Explanation(schedulable=True, summary="2/14 nodes fit", node_classes=_verdicts(),
                         best_node="node-a", best_score=87.5, quota_admitted=True)


def _samples() -> dict[type, msgspec.Struct]:
    gpus = [
        s.GpuSample(gpu_uuid=f"GPU-{i}", gpu_index=i, util_pct=37.5 + i, mem_util_pct=20.0, mem_used_mib=1024 * i,
                    mem_total_mib=81920, temperature_c=55.0, power_w=250.5, power_limit_w=400.0, sm_clock_mhz=1410,
                    mem_clock_mhz=1593, throttle_reasons=0x4, ecc_uncorrected_volatile=0, xid_last=0,
                    pcie_replay=0, nvlink_up=12)
        for i in range(4)
    ]
    stats = s.Stats(mean=40.0, max=90.0, p95=80.0)
    out: list[msgspec.Struct] = [
        s.NodeInventory(**EV, node="node-a", gpus=tuple(_gpu(i) for i in range(2)), rack="r1", zone="z1",
                        driver_version="550.90.07", cuda_version="12.4", cpu_milli=128000, memory_mib=1048576,
                        labels={"pool": "train"}),
        s.GpuSampled.from_samples(gpus, **EV, node="node-a", sampled_at=T0, interval_s=10.0, seq=42),
        s.GpuRolledUp(**EV, node="node-a", window=s.RollupWindow.MINUTE, window_start=T0 - 60, gpus=(
            s.GpuRollup(gpu_uuid="GPU-0", gpu_index=0, samples=6, util_pct=stats, power_w=stats,
                        throttled_pct=16.7, ecc_uncorrected_delta=1, xid_last=79),
        )),
        s.PodUsageReported(**EV, node="node-a", window_start=T0 - 60, window_s=60.0, usage=(
            s.PodGpuUsage(namespace="team-a", pod="train-0", gpu_uuid="GPU-0", tenant="team-a", gpu_milli=500,
                          seconds=60.0, gpu_seconds_allocated=30.0, gpu_seconds_used=12.0, util_pct_avg=20.0,
                          util_pct_max=35.0, mem_used_mib_avg=20000.0, mem_used_mib_max=20480.0,
                          pod_uid="uid-1"),
        )),
        s.DemandPredicted(**EV, model="lstm-demand", model_version="2026-01-01.1", issued_at=T0, start=T0 + 300,
                          step_s=300.0, horizon_steps=3, quantiles=(0.1, 0.5, 0.9), series=(
            s.DemandSeries(metric="gpu_milli_requested", labels={"queue": "team-a"},
                           values=((1000.0, 1100.0, 1200.0), (2000.0, 2100.0, 2200.0), (3000.0, 3100.0, 3200.0))),
        )),
        s.GpuUtilPredicted(**EV, model="lstm-gpu", model_version="v3", issued_at=T0, start=T0 + 60, step_s=60.0,
                           horizon_steps=2, quantiles=(0.5,), node="node-a",
                           gpus=(s.GpuForecast(gpu_uuid="GPU-0", values=((40.0, 45.0),)),)),
        s.GpuScored(**EV, node="node-a", gpu_uuid="GPU-0", gpu_index=0, score=62.0, state=s.HealthState.DEGRADED,
                    scored_at=T0, reasons=("xid_79",), components={"xid": 40.0, "thermal": 95.0}),
        s.GpuStateChanged(**EV, node="node-a", gpu_uuid="GPU-0", gpu_index=0, previous=s.HealthState.HEALTHY,
                          current=s.HealthState.DEGRADED, score=62.0, changed_at=T0, reasons=("xid_79",)),
        s.DrainRecommended(**EV, node="node-a", gpu_uuid="GPU-0", gpu_index=0, state=s.HealthState.QUARANTINED,
                           risk=0.75, urgent=True, reason="quarantined (xid_79)", recommended_at=T0,
                           pods=(s.DrainPod(pod_uid="p-ckpt", order=0, checkpointable=True, running_s=3600.0),
                                 s.DrainPod(pod_uid="p-new", order=1, priority=5, running_s=60.0,
                                            work_lost_s=60.0))),
        s.AlertRaised(**EV, fingerprint=s.fingerprint("gpu_xid_critical", {"node": "node-a", "gpu": "GPU-0"}),
                      rule="gpu_xid_critical", severity=s.Severity.CRITICAL, summary="XID 79 on GPU-0",
                      started_at=T0, node="node-a", gpu_uuid="GPU-0", labels={"xid": "79"}, value=79.0),
        s.AlertResolved(**EV, fingerprint=s.fingerprint("gpu_xid_critical", {"node": "node-a", "gpu": "GPU-0"}),
                        rule="gpu_xid_critical", severity=s.Severity.CRITICAL, started_at=T0, resolved_at=T0 + 600,
                        node="node-a", gpu_uuid="GPU-0"),
        _pending(),
        s.PlacementDecided(**EV, decision_id="d-1", pod_uid="uid-1", pod_name="train-0", namespace="team-a",
                           node="node-a", slices=(_slice(0),), policy="binpack-fragmentation", score=87.5,
                           decided_at=T0, gang_id="job-7", queue="team-a", preemptions=(
            s.PlannedPreemption(pod_uid="uid-9", pod_name="batch-9", namespace="team-b", node="node-a",
                                reason="reclaim", checkpoint_first=True),
        )),
        s.PodUnschedulable(**EV, pod_uid="uid-2", pod_name="big-0", namespace="team-a",
                           reason=s.UnschedulableReason.INSUFFICIENT_GPU, message="needs 8 free GPUs",
                           node_classes=_verdicts()[1:], retry_after_s=30.0),
        s.PlacementExplained(**EV, pod_uid="uid-1", pod_name="train-0", namespace="team-a",
                             explanation=_explanation(), explained_at=T0),
        s.PodBound(**EV, pod_uid="uid-1", pod_name="train-0", namespace="team-a", node="node-a",
                   slices=(_slice(0),), bound_at=T0 + 1, decision_id="d-1", queue="team-a"),
        s.PodBindFailed(**EV, pod_uid="uid-1", pod_name="train-0", namespace="team-a", node="node-a",
                        decision_id="d-1", reason="node not found", transient=True, failed_at=T0 + 1, attempt=1),
        s.PodPreempted(**EV, pod_uid="uid-9", pod_name="batch-9", namespace="team-b", node="node-a",
                       reason="reclaim", preempted_at=T0 + 1, decision_id="d-1", preemptor_pod_uid="uid-1",
                       checkpointed=True, requeued=True, slices=(_slice(1),)),
        s.PodFinished(**EV, pod_uid="uid-1", pod_name="train-0", namespace="team-a",
                      outcome=s.PodOutcome.SUCCEEDED, finished_at=T0 + 3600, node="node-a", started_at=T0 + 2,
                      exit_code=0, slices=(_slice(0),)),
        s.NodePowerRecommended(**EV, recommendation_id="power-1", node="node-b", action="power-down",
                               recommended_at=T0, reason="keep 3 of 4 nodes powered", powered_target=3,
                               demand_nodes=1, forecast_nodes=1.4),
        s.NodePowerChanged(**EV, node="node-b", state="booting", ready_at=T0 + 600, changed_at=T0,
                           recommendation_id="power-2"),
        s.CheckpointRequested(**EV, request_id="c-1", pod_uid="uid-9", pod_name="batch-9", namespace="team-b",
                              node="node-a", reason="preemption", deadline_s=120.0, requested_at=T0,
                              decision_id="d-1"),
        s.CheckpointAcknowledged(**EV, request_id="c-1", pod_uid="uid-9", namespace="team-b",
                                 status=s.CheckpointStatus.COMPLETED, acknowledged_at=T0 + 30,
                                 checkpoint_uri="s3://ckpt/batch-9/0001"),
        s.QuotaUsageReported(**EV, as_of=T0, queues=(
            s.QueueUsage(queue="team-a", parent="research", weight=2.0,
                         guaranteed=s.Resources(gpu_milli=8000), limit=s.Resources(gpu_milli=16000),
                         used=s.Resources(gpu_milli=9500, cpu_milli=64000), fair_share=s.Resources(gpu_milli=10000),
                         running_pods=12, pending_pods=3),
        )),
        s.AdmitRequest(**EV, pod=_pending(), node="node-a", dry_run=True),
        s.AdmitReply(**EV, pod_uid="uid-1", admitted=True, queue="team-a", reason="borrowed", would_reclaim=(
            s.ReclaimCandidate(pod_uid="uid-9", pod_name="batch-9", namespace="team-b", queue="team-b",
                               node="node-a", frees=s.Resources(gpu_milli=500, gpu_memory_mib=20480)),
        )),
        s.ExplainRequest(**EV, pod_uid="uid-1"),
        s.ExplainReply(**EV, pod_uid="uid-1", explanation=_explanation()),
        s.CordonRequest(**EV, gpu_uuid="GPU-0", reason="RMA ticket 42: ECC storm", by="alice",
                        state=s.HealthState.QUARANTINED),
        s.CordonReply(**EV, gpu_uuid="GPU-0", action=s.CordonAction.CORDON, previous=s.HealthState.DEGRADED,
                      current=s.HealthState.QUARANTINED, at=T0, by="alice", reason="RMA ticket 42: ECC storm",
                      node="node-a", changed=True),
        s.DurationRequest(**EV, pod_name="train-bert-run17", queue="team-a", image="registry/bert:2", num_gpu=8),
        s.DurationReply(**EV, seconds=5400.0, basis="recurring (16 runs)", runs_observed=1200),
        s.WorldSnapshotRequest(**EV, node_offset=500, limit=500),
        s.WorldSnapshotReply(**EV, world="twin", at=T0, generation=42, total_nodes=1, total_pods=1, pending_pods=3,
                             nodes=(s.WorldNode(name="node-a", cpu_milli=96000, memory_mib=393216, gpu_model="A100",
                                                gpus=(s.WorldGpu(uuid="GPU-0", index=0, model="A100", memory_mib=81251,
                                                                 nvlink_island="node-a/nvl0", numa_node=0),),
                                                rack="rack-0", labels={"kind": "a100"}),),
                             pods=(s.WorldPod(pod_uid="uid-1", pod_name="train-0", namespace="team-a", node="node-a",
                                              slices=(_slice(0),), bound_at=T0, decision_id="d-1", queue="team-a",
                                              priority=100, checkpointable=True),)),
    ]
    return {type(m): m for m in out}


@pytest.fixture(scope="session")
def samples() -> dict[type, msgspec.Struct]:
    return _samples()
