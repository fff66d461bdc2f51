"""The Kubernetes world's side of a resize: an elastic job's running workers are the watched pods of
its gang in its namespace, and a resize's checkpoint request writes the new world size beside the
handshake annotations (removing the previous answer, so a worker asked at each resize answers
again); a request that is no resize removes a world size left from one."""

from __future__ import annotations

from typing import Any

from gpuaware.k8s import ASSIGNED, Change, KubeMirror
from gpuaware.schemas import CheckpointRequested
from gpuaware.services.binder.kube_world import KubeWorld
from gpuaware.services.binder.world import Worker


def pod(uid: str, node: str | None = None, *, gang: str = "job", high: str = "3", ns: str = "ml") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "gpuaware",
                            "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    ann = {"gpuaware.io/gang": gang, "gpuaware.io/gang-min-members": "1", "gpuaware.io/gang-max-members": high}
    return {"metadata": {"uid": uid, "name": f"p-{uid}", "namespace": ns, "annotations": ann, "resourceVersion": "1"},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


class Core:
    """The one CoreV1Api call a checkpoint request makes."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.patches.append((name, namespace, body))


def world(*pods: dict[str, Any]) -> tuple[KubeWorld, Core]:
    core = Core()
    w = KubeWorld(core, cluster="c")
    w.mirror = KubeMirror(cluster="c", source="t")
    for p in pods:
        w.mirror.on_pod(Change("added", p), now=1.0)
    return w, core


async def test_the_running_workers_are_the_gangs_bound_pods_in_its_namespace() -> None:
    w, _ = world(pod("a", "n1"), pod("b", "n2"), pod("c"), pod("x", "n1", gang="other"),
                 pod("y", "n3", ns="elsewhere"), pod("f", "n1", gang="fixed", high="0"))
    job = await w.elastic_workers("c")
    assert job is not None and (job.job, job.minimum, job.runs()) == ("ml/job", 1, True)
    assert job.running == (Worker("a", "p-a", "ml", "n1"), Worker("b", "p-b", "ml", "n2"))
    assert await w.elastic_workers("f") is None          # a fixed gang
    assert await w.elastic_workers("nobody") is None


async def test_a_resize_request_carries_the_world_size_and_clears_the_last_answer() -> None:
    w, core = world(pod("a", "n1"))

    def request(rid: str, reason: str, size: int | None) -> CheckpointRequested:
        return CheckpointRequested(source="t", emitted_at=1000.0, cluster="c", request_id=rid, pod_uid="a",
                                   pod_name="p-a", namespace="ml", node="n1", reason=reason, deadline_s=30.0,
                                   requested_at=1000.0, world_size=size)

    await w.request_checkpoint(request("d-1/resize/a", "resize", 3))
    await w.request_checkpoint(request("d-2/a", "preemption", None))
    (_, _, first), (_, _, second) = core.patches
    ann = first["metadata"]["annotations"]
    assert ann[ASSIGNED.CHECKPOINT_WORLD_SIZE] == "3" and ann[ASSIGNED.CHECKPOINT_DONE] is None
    assert ASSIGNED.CHECKPOINT_REQUESTED in ann and ASSIGNED.CHECKPOINT_DEADLINE in ann
    assert second["metadata"]["annotations"][ASSIGNED.CHECKPOINT_WORLD_SIZE] is None
    assert w.mirror.pending_checkpoints == {"a": "d-2/a"}
