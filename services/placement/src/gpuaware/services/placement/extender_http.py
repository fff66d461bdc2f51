"""The kube-scheduler extender, served by the placement service from its own view.

Why here: the issue asks the extender to answer from the same placement session the service uses,
so a node it passes is a node this instance would consider, with the same profile and scores. Every
instance (leader or standby) keeps the same hot view from the streams, so every replica can answer;
kube-scheduler reaches them through one Service. Started when ``GPUAWARE_PLACEMENT_EXTENDER_PORT`` is
set; the bind verb creates the Binding through ``gpuaware.k8s.api.bind`` (in-cluster credentials) when
``GPUAWARE_PLACEMENT_EXTENDER_BIND`` is true. The wire, the answers and the HTTP rules are
``gpuaware.k8s.extender`` / ``gpuaware.k8s.server``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from gpuaware.k8s import BindingArgs, BindOutcome, Extender, extender_app
from gpuaware.schemas import GpuSlice, PodBound
from gpuaware.services.placement import convert
from gpuaware.services.placement.state import PlacementState

__all__ = ["ExtenderServer", "build_extender"]

log = logging.getLogger(__name__)


def build_extender(state: PlacementState, *, bind: bool = False, core: Any = None) -> Extender:
    bind_fn = None
    if bind:
        from gpuaware import k8s

        core = core or k8s.core_api()

        def bind_fn(ns: str, name: str, uid: str, node: str, ann: Mapping[str, str]) -> BindOutcome:
            return k8s.bind(core, ns, name, uid, node, ann)

    def on_bound(b: BindingArgs, slices: tuple[GpuSlice, ...], decision: str) -> None:
        """The binding the extender just made holds its GPUs in this view at once (the next filter sees
        it); the binder's watch reports it to the other replicas through the stream."""
        now = time.time()
        state.apply_bound(PodBound(source=f"{state.source}/extender", emitted_at=now, cluster=state.cluster_name,
                                   pod_uid=b.pod_uid, pod_name=b.pod_name, namespace=b.pod_namespace, node=b.node,
                                   slices=slices, bound_at=now, decision_id=decision or None))

    return Extender(planner=state.planner, cluster=state.cluster_name, source=f"{state.source}/extender",
                    request_of=lambda p: convert.pod_request(p, state.planner.view.models, state.capability),
                    bind_fn=bind_fn, gpus_of=lambda n: state.gpus.get(n, ()), on_bound=on_bound)


class ExtenderServer:
    def __init__(self, state: PlacementState, host: str, port: int, *, bind: bool = False) -> None:
        self.app = extender_app(build_extender(state, bind=bind))
        self.runner = web.AppRunner(self.app, access_log=None)
        self.host, self.port = host, port

    async def start(self) -> None:
        await self.runner.setup()
        await web.TCPSite(self.runner, self.host, self.port).start()
        log.info("kube-scheduler extender on http://%s:%d (filter, prioritize, preempt, bind)", self.host, self.port)

    async def stop(self) -> None:
        await self.runner.cleanup()
