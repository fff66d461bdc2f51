"""The cluster the recorded extender payloads talk about, as the placement service would see it.

gpu-node-07 and gpu-node-12: free 8 x A100-80GB; gpu-node-08: 7 of its 8 GPUs bound (a pod asking 2
does not fit now: a dynamic verdict); gpu-node-11: a single-GPU node (can never hold 2: static).
Built from the recorded DGX node object through ``gpuaware.k8s.translate`` and fed to the placement
service's own state, so the extender answers from the same view and profile the service decides with.
"""

from __future__ import annotations

from typing import Any

from k8s_payloads import node

from gpuaware.k8s.extender import Extender
from gpuaware.k8s.nodes import node_inventory
from gpuaware.k8s.objects import BindOutcome
from gpuaware.placement import POLICIES
from gpuaware.schemas.binder import PodBound
from gpuaware.schemas.placement import GpuSlice
from gpuaware.services.placement import convert
from gpuaware.services.placement.state import PlacementState

NODES = {"gpu-node-07": 8, "gpu-node-08": 8, "gpu-node-11": 1, "gpu-node-12": 8}


def state(nodes: dict[str, int] | None = None, busy: dict[str, int] | None = None,
          profile: str = "GpuAware") -> PlacementState:
    st = PlacementState(cluster_name="c", source="placement/test", policy_name=profile,
                        policy_config=POLICIES[profile])
    for name, gpus in (nodes or NODES).items():
        st.apply_inventory(node_inventory(node(name, gpus=gpus), source="binder/k8s", cluster="c"))
    for name, n in ({"gpu-node-08": 7} if busy is None else busy).items():
        slices = tuple(GpuSlice(gpu_uuid=f"{name}/gpu{i}", gpu_index=i, gpu_milli=1000, memory_mib=81920)
                       for i in range(n))
        st.apply_bound(PodBound(source="binder", emitted_at=0.0, cluster="c", pod_uid=f"busy-{name}",
                                pod_name=f"busy-{name}", namespace="ns", node=name, slices=slices, bound_at=0.0))
    return st


def extender(st: PlacementState, bound: list[tuple[Any, ...]] | None = None,
             outcome: BindOutcome | None = None) -> Extender:
    def bind(ns: str, name: str, uid: str, node_name: str, ann: Any) -> BindOutcome:
        if bound is not None:
            bound.append((ns, name, uid, node_name, dict(ann)))
        return outcome or BindOutcome(True, node=node_name)

    return Extender(planner=st.planner, cluster="c",
                    request_of=lambda p: convert.pod_request(p, st.planner.view.models, st.capability),
                    bind_fn=bind, gpus_of=lambda n: st.gpus[n])
