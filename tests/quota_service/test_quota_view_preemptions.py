"""The quota service's view counts each pod's preemptions from the binder's events: the count survives
the pod's re-queue, caps quota's reclaim plans, and is forgotten once the pod is gone for good."""

from __future__ import annotations

import msgspec
import pytest

from gpuaware.quota import validate
from gpuaware.runtime import SettingsError
from gpuaware.schemas import (
    AdmitRequest,
    GpuSlice,
    PodBound,
    PodFinished,
    PodOutcome,
    PodPending,
    PodPreempted,
)
from gpuaware.services.quota.settings import QuotaSettings
from gpuaware.services.quota.state import QuotaView

TREE = """
capacity: {"*": {gpus: 4, gpu_milli: 4000}}
max_preemptions_per_pod: 1
queues:
  - {name: org, guaranteed: {"*": {gpus: 4}}}
  - {name: owner, parent: org, guaranteed: {"*": {gpus: 2}}}
  - {name: busy, parent: org, guaranteed: {"*": {gpus: 2}}}
"""


def pending(uid: str, queue: str, t: float) -> PodPending:
    return PodPending(source="binder/0", emitted_at=t, pod_uid=uid, pod_name=uid, namespace="ns", submitted_at=t,
                      num_gpu=1, queue=queue, checkpointable=True)


def run(view: QuotaView, uid: str, t: float) -> None:
    """Asked about (quota.admit), then bound: what placement and the binder do for each start."""
    assert view.admit(AdmitRequest(source="placement/0", emitted_at=t, pod=pending(uid, "busy", t)), t).admitted
    view.bound(PodBound(source="binder/0", emitted_at=t, pod_uid=uid, pod_name=uid, namespace="ns", node="n1",
                        slices=(GpuSlice(gpu_uuid=f"GPU-{uid}", gpu_index=0, gpu_milli=1000, memory_mib=0),),
                        bound_at=t, queue="busy"), t)


def preempted(uid: str, t: float, *, requeued: bool = True) -> PodPreempted:
    return PodPreempted(source="binder/0", emitted_at=t, pod_uid=uid, pod_name=uid, namespace="ns", node="n1",
                        reason="reclaim", preempted_at=t, requeued=requeued)


def would_reclaim(view: QuotaView, t: float) -> list[str]:
    req = AdmitRequest(source="placement/0", emitted_at=t, pod=pending("owner-pod", "owner", t), dry_run=True)
    return [c.pod_uid for c in view.admit(req, t).would_reclaim]


@pytest.fixture
def view() -> QuotaView:
    """busy holds all 4 GPUs (2 borrowed from owner), its pods bound at t = 0..3 (d the newest)."""
    v = QuotaView(validate(TREE), cluster="default", source="quota/0")
    for i, uid in enumerate("abcd"):
        run(v, uid, float(i))
    return v


def test_a_requeued_pods_count_survives_and_caps_the_next_plan(view):
    assert would_reclaim(view, 100) == ["d"]                 # the newest: least work at risk
    view.gone(preempted("d", 110), 110)
    view.gone(preempted("d", 110), 110)                      # redelivered: counted once
    assert view.ledger.preemptions("d") == 1 and "d" not in view.ledger.running
    run(view, "d", 120)                                      # pending again, asked about, bound: same uid
    assert view.ledger.running["d"].preemptions == 1
    assert would_reclaim(view, 200) == ["c"]                 # d is still the newest, but preempted once (cap 1)


def test_the_count_is_forgotten_when_the_pod_is_gone_for_good(view):
    view.gone(preempted("d", 110), 110)
    run(view, "d", 120)
    view.gone(PodFinished(source="binder/0", emitted_at=300, pod_uid="d", pod_name="d", namespace="ns",
                          outcome=PodOutcome.SUCCEEDED, finished_at=300, node="n1", started_at=120), 300)
    assert view.ledger.preemptions("d") == 0
    view.gone(preempted("c", 310, requeued=False), 310)      # evicted for good: its controller makes a new pod
    assert view.ledger.preemptions("c") == 0


def test_a_replacement_pod_brings_its_jobs_count_and_is_capped(view):
    """A controller's replacement for an evicted pod has a new uid; the binder's count per job rides in
    ``job_preemptions``, and quota's plans read it as the new pod's own."""
    view.gone(preempted("d", 110, requeued=False), 110)     # evicted: its Job makes "d2"
    t = 120.0
    pod = msgspec.structs.replace(pending("d2", "busy", t), job_preemptions=1)
    assert view.admit(AdmitRequest(source="placement/0", emitted_at=t, pod=pod), t).admitted
    view.bound(PodBound(source="binder/0", emitted_at=t, pod_uid="d2", pod_name="d2", namespace="ns", node="n1",
                        slices=(GpuSlice(gpu_uuid="GPU-d2", gpu_index=0, gpu_milli=1000, memory_mib=0),),
                        bound_at=t, queue="busy"), t)
    assert view.ledger.running["d2"].preemptions == 1
    assert would_reclaim(view, 200) == ["c"]                 # d2 is the newest, but its job hit the cap (1)


def test_a_new_tree_keeps_the_counts(view):
    view.gone(preempted("d", 110), 110)
    view.replace_tree(validate(TREE))
    run(view, "d", 120)
    assert view.ledger.running["d"].preemptions == 1


def test_the_cap_setting_is_the_crd_trees():
    assert QuotaSettings.from_env({}).tree_fields() == {"max_preemptions_per_pod": 2}
    env = {"GPUAWARE_QUOTA_TREE_SOURCE": "crd", "GPUAWARE_QUOTA_MAX_PREEMPTIONS_PER_POD": "null"}
    assert QuotaSettings.from_env(env).tree_fields() == {"max_preemptions_per_pod": None}
    with pytest.raises(SettingsError, match="max_preemptions_per_pod"):
        QuotaSettings.from_env({"GPUAWARE_QUOTA_MAX_PREEMPTIONS_PER_POD": "-1"})
