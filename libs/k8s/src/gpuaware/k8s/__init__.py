"""gpuaware.k8s — the Kubernetes adapter (the only package that imports ``kubernetes``).

Modules: ``translate`` (Pod/Node -> PodPending/NodeInventory), ``objects`` (Binding, assignment
annotations, Event, Eviction, Lease as client models; reading bind answers), ``api`` (the calls,
with the Binding quirk handled), ``watch`` (list+watch state machine), ``leader`` (Lease election),
``extender`` (kube-scheduler extender wire and answers), ``server`` (its HTTP front), ``crs`` (GPUQueue /
GPUPolicy objects -> the configuration in force and each object's status), ``cr_watch`` (that, watched).
"""

from gpuaware.k8s.api import (
    EvictOutcome,
    bind,
    core_api,
    custom_api,
    evict,
    node_source,
    patch_node_power,
    patch_pod_annotations,
    patch_policy_status,
    patch_queue_status,
    pod_source,
    policy_source,
    post_event,
    queue_source,
    read_claim,
    read_gang,
)
from gpuaware.k8s.cr_watch import ConfigWatch
from gpuaware.k8s.crs import ACCEPTED, CustomResourceError, PolicySet, QueueSet, Verdict
from gpuaware.k8s.election import KubeLeaderLease
from gpuaware.k8s.extender import BindingArgs, Extender
from gpuaware.k8s.mirror import KubeMirror
from gpuaware.k8s.nodes import node_inventory
from gpuaware.k8s.objects import (
    ASSIGNED,
    POWER,
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
    "ACCEPTED",
    "ASSIGNED",
    "EXTENDER_SCHEDULER_NAME",
    "POWER",
    "SCHEDULER_NAME",
    "BindOutcome",
    "BindingArgs",
    "Change",
    "ConfigWatch",
    "CustomResourceError",
    "EvictOutcome",
    "Extender",
    "KubeLeaderLease",
    "KubeMirror",
    "PolicySet",
    "QueueSet",
    "Verdict",
    "Watcher",
    "admission_app",
    "assignment_annotations",
    "bind",
    "checkpoint_annotations",
    "core_api",
    "custom_api",
    "event",
    "evict",
    "extender_app",
    "is_ours",
    "node_inventory",
    "node_source",
    "patch_node_power",
    "patch_pod_annotations",
    "patch_policy_status",
    "patch_queue_status",
    "pod_source",
    "policy_source",
    "post_event",
    "queue_source",
    "read_claim",
    "read_gang",
    "run_watch",
    "why_pending",
]
