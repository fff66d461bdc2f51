"""gpuaware.k8s — the Kubernetes adapter (the only package that imports ``kubernetes``).

Modules: ``translate`` (Pod/Node -> PodPending/NodeInventory), ``objects`` (Binding, assignment
annotations, Event, Eviction, Lease as client models; reading bind answers), ``api`` (the calls,
with the Binding quirk handled), ``watch`` (list+watch state machine), ``leader`` (Lease election),
``extender`` (kube-scheduler extender wire and answers), ``server`` (its HTTP front).
"""

from gpuaware.k8s.api import (
    EvictOutcome,
    bind,
    core_api,
    evict,
    node_source,
    patch_pod_annotations,
    pod_source,
    post_event,
    read_claim,
    read_gang,
)
from gpuaware.k8s.election import KubeLeaderLease
from gpuaware.k8s.extender import BindingArgs, Extender
from gpuaware.k8s.mirror import KubeMirror
from gpuaware.k8s.nodes import node_inventory
from gpuaware.k8s.objects import (
    ASSIGNED,
    BindOutcome,
    assignment_annotations,
    checkpoint_annotations,
    event,
    why_pending,
)
from gpuaware.k8s.server import admission_app, extender_app
from gpuaware.k8s.translate import EXTENDER_SCHEDULER_NAME, SCHEDULER_NAME, is_ours
from gpuaware.k8s.watch import Change, Watcher, run_watch

__all__ = [
    "ASSIGNED",
    "EXTENDER_SCHEDULER_NAME",
    "SCHEDULER_NAME",
    "BindOutcome",
    "BindingArgs",
    "Change",
    "EvictOutcome",
    "Extender",
    "KubeLeaderLease",
    "KubeMirror",
    "Watcher",
    "admission_app",
    "assignment_annotations",
    "bind",
    "checkpoint_annotations",
    "core_api",
    "event",
    "evict",
    "extender_app",
    "is_ours",
    "node_inventory",
    "node_source",
    "patch_pod_annotations",
    "pod_source",
    "post_event",
    "read_claim",
    "read_gang",
    "run_watch",
    "why_pending",
]
