"""What one placement instance knows: the node set, the allocation ledger and the profile built on them.

Inventories and the world's snapshot set nodes (`set_node`); nothing is rebuilt per event. Before a
cycle, `ensure_cluster` rebuilds the cluster and the profile when the node set changed (a new
`Cluster` re-reserves every pod the ledger holds), so replaying the streams after a restart costs one
rebuild, not one per node. The profile is rebuilt too when the request mix the fragmentation scores
assume moved (request_mix.py). Plugins' state that must outlive a rebuilt profile (preemption
cooldowns, the queue order's predictions and owed service) is kept here across builds.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from gpuaware.placement.builtin import REGISTRY
from gpuaware.placement.config import PlannerConfig
from gpuaware.placement.explain import PodExplanation, explain, node_class_names
from gpuaware.placement.frag import TypicalPods
from gpuaware.placement.ledger import Ledger, Phase
from gpuaware.placement.model import GpuModel, NodeSpec, PodRequest
from gpuaware.placement.outcomes import Counters
from gpuaware.placement.queue_order import QueueSort
from gpuaware.placement.request_mix import RequestMix
from gpuaware.placement.session import Framework

log = logging.getLogger(__name__)

__all__ = ["PlacementView"]


class PlacementView:
    """The node set, the ledger, and the framework built for them (see the module docstring)."""

    def __init__(self, config: PlannerConfig, clock: Callable[[], float], counters: Counters) -> None:
        self.config = config
        self.clock = clock
        self.counters = counters
        self.ledger = Ledger(max_tombstones=config.max_tombstones)
        self.specs: dict[str, NodeSpec] = {}
        self.models: dict[str, GpuModel] = {}
        self.mix = RequestMix(config.typical or TypicalPods.from_counts(dict(config.prior)),
                              learn=config.learn_typical and config.typical is None,
                              min_pods=config.typical_min_pods, window=config.typical_window,
                              drift=config.typical_drift)
        self.framework: Framework | None = None
        self.order: QueueSort | None = None
        """the profile's queue order (``queue_sort``), built with the first framework and kept across
        rebuilt ones (its predictions and owed service outlive them); None: priority, then arrival"""
        self._memory: dict[str, Any] = {}
        self._dirty = False
        self._classes: list[str] = []

    def set_node(self, spec: NodeSpec, model: GpuModel | None) -> bool:
        """A node as inventoried (and its GPU model as reported). True when something changed."""
        if model is not None and self.models.get(model.name) != model:
            if model.name in self.models:
                self._dirty = True
            self.models[model.name] = model
        if self.specs.get(spec.name) == spec:
            return False
        self.specs[spec.name] = spec
        self._dirty = True
        return True

    def invalidate(self) -> None:
        """Something about the nodes changed that `set_node` does not see: rebuild before the next cycle."""
        self._dirty = True

    def ensure_cluster(self) -> bool:
        """Rebuild the cluster after node-set changes (between cycles). True when there is one."""
        if self._dirty:
            self._dirty = False
            specs = [self.specs[n] for n in sorted(self.specs)]
            unplaced = self.ledger.set_nodes(specs, dict(self.models))
            self.counters.cluster_rebuilds += 1
            if unplaced:
                log.warning("cluster view rebuilt (%d nodes): %d pods hold GPUs on nodes not in the view",
                            len(specs), len(unplaced))
            else:
                log.info("cluster view rebuilt: %d nodes", len(specs))
            cluster = self.ledger.cluster
            self._classes = node_class_names(cluster.snapshot()) if cluster is not None else []
            self.build_framework()
            for e in self.ledger.waiting([Phase.UNRESOLVABLE]):
                self.ledger.set_phase(e, Phase.PARKED)  # a new node set may hold them: the next pass sees
        return self.ledger.cluster is not None

    def observe(self, request: PodRequest) -> None:
        """A pending pod's shape joins the request mix; the profile is rebuilt when the mix moved."""
        if self.mix.observe(request):
            log.info("request mix moved: %d typical shapes now (scores rebuilt)", len(self.mix.typical.keys))
            self.build_framework()

    def use_policy(self, name: str, config: Mapping[str, Any]) -> None:
        """Decide with another profile from the next cycle on (its GPUPolicy changed). The queue order
        is built anew only when the profile names another one (else its predictions and owed service
        carry over, as across any rebuild)."""
        new_order = config.get("queue_sort") != self.config.policy_config.get("queue_sort")
        self.config = replace(self.config, policy_name=name, policy_config=config)
        if self.framework is not None:  # else built with the cluster
            self.build_framework(new_order=new_order)

    def build_framework(self, *, new_order: bool = False) -> None:
        n = len(self.specs)
        rank = np.random.default_rng(self.config.seed).permutation(n) if n else None
        cfg = self.config
        preemption = {"name": "default-preemption", "args": {"max_victims": cfg.max_victims,
                                                            "cooldown_s": cfg.preemption_cooldown_s}}
        framework = REGISTRY.build_framework(cfg.policy_config, typical=self.mix.typical, seed=cfg.seed,
                                             tie_rank=rank, name=cfg.policy_name, clock=self.clock,
                                             memory=self._memory,
                                             default_post_filter=preemption if cfg.preemption else None,
                                             extra_filters=cfg.extra_filters, observers=cfg.observers,
                                             capacity=self._gpu_capacity)
        if not cfg.preemption:
            framework.post_filters = ()
        framework.permits += cfg.permits
        if self.framework is None or new_order:
            self.order = framework.queue_sort
        framework.queue_sort = self.order
        if self.framework is not None:  # the counts are this instance's, not one build's
            framework.scheduler.stats = self.framework.scheduler.stats
        self.framework = framework
        self.counters.scheduler_rebuilds += 1

    def explain(self, req: PodRequest, max_classes: int = 50) -> PodExplanation:
        """Why `req` fits where it does, or nowhere, per node class (explain.py)."""
        if not self.ensure_cluster():
            raise RuntimeError("no nodes in the cluster view yet")
        assert self.ledger.cluster is not None and self.framework is not None
        sched = self.framework.scheduler

        def scores(pod: PodRequest, s: Any) -> tuple[np.ndarray, np.ndarray]:
            nodes, totals = sched.scores(pod, s)
            return nodes, totals / sched.total_weight

        return explain(req, self.ledger.cluster.snapshot(), sched.inner, scores=scores, classes=self._classes,
                       max_classes=max_classes)

    def summary(self) -> dict[str, Any]:
        """The view in numbers (the service logs it and exports it as metrics)."""
        phases = Counter(e.phase.value for e in self.ledger)
        c = self.ledger.cluster
        return {"nodes": len(self.specs), "pods": dict(phases),
                "gpu_milli_used": int(c.used_gpu_milli) if c else 0,
                "gpu_milli_total": int(c.total_gpu_milli) if c else 0,
                "counters": asdict(self.counters), "ledger": asdict(self.ledger.stats),
                "cache": asdict(self.framework.scheduler.stats) if self.framework else {}}

    def _gpu_capacity(self) -> float:
        return float(sum(s.num_gpu for s in self.specs.values()))
