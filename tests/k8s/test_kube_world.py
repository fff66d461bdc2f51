"""The binder's Kubernetes world over HTTP: the official client lists and watches a loopback server
that replays recorded objects, the mirror turns them into exactly-once contract events, and bind /
evict / checkpoint requests go out as the apiserver expects them."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from k8s_payloads import load, node

from gpuaware.k8s import api
from gpuaware.k8s.mirror import KubeMirror
from gpuaware.k8s.objects import ASSIGNED
from gpuaware.k8s.watch import Change
from gpuaware.schemas import (
    CheckpointAcknowledged,
    CheckpointRequested,
    GpuSlice,
    PlacementDecided,
    PlannedPreemption,
    PodFinished,
    PodPending,
    PodUnschedulable,
    WorldSnapshotRequest,
)
from gpuaware.schemas.placement import NodeClassVerdict
from gpuaware.services.binder.kube_world import KubeWorld
from gpuaware.services.binder.world import WorldRefused


def _pod(uid: str, rv: str = "1", **spec: Any) -> dict[str, Any]:
    p = copy.deepcopy(load("extender/object-pod-pending.json"))
    p["metadata"].update(uid=uid, name=f"p-{uid}", resourceVersion=rv)
    p["spec"]["schedulerName"] = "gpuaware"
    p["spec"].update(spec)
    return p


def test_mirror_announces_once_and_reports_finishes() -> None:
    m = KubeMirror(cluster="c", source="t")
    m.on_node(Change("added", node("gpu-node-07")))
    out = m.on_pod(Change("added", _pod("a")), now=10.0)
    assert [(type(e).__name__, i) for e, i in out] == [("PodPending", "c/pending/a/0")]
    assert m.on_pod(Change("modified", _pod("a", "2")), now=11.0) == []  # same attempt: said once
    re = m.requeue("a", now=12.0)
    assert re is not None and re.attempt == 1
    bound = _pod("a", "3", nodeName="gpu-node-07")
    bound["metadata"]["annotations"][ASSIGNED.GPU_UUIDS] = "gpu-node-07/gpu0,gpu-node-07/gpu1"
    bound["metadata"]["annotations"][ASSIGNED.DECISION] = "c/a/1"
    m.on_pod(Change("modified", bound), now=13.0)
    assert m.state("a") == "bound"
    b = m.bound("a")
    assert b is not None and [s.gpu_index for s in b.slices] == [0, 1] and b.decision_id == "c/a/1"
    snap = m.snapshot(WorldSnapshotRequest(source="t", emitted_at=0.0), now=14.0)
    assert [n.name for n in snap.nodes] == ["gpu-node-07"] and len(snap.nodes[0].gpus) == 8
    assert [p.pod_uid for p in snap.pods] == ["a"] and snap.pods[0].cpu_milli == 16000
    done = copy.deepcopy(bound)
    done["status"]["phase"] = "Succeeded"
    out = m.on_pod(Change("modified", done), now=15.0)
    assert [(type(e).__name__, i) for e, i in out] == [("PodFinished", "c/finished/a")]
    assert m.on_pod(Change("deleted", done), now=16.0) == []  # finished already said
    assert m.state("a") == "finished"


def test_mirror_refuses_bad_annotation_and_reads_checkpoint_answer() -> None:
    m = KubeMirror(cluster="c", source="t")
    bad = _pod("b")
    bad["metadata"]["annotations"]["gpuaware.io/topology"] = "same-planet"
    assert m.on_pod(Change("added", bad), now=1.0) == []
    assert "same-planet" in m.refused["b"]
    m.pending_checkpoints["v"] = "req-1"
    victim = _pod("v", nodeName="gpu-node-07")
    victim["metadata"]["annotations"][ASSIGNED.CHECKPOINT_DONE] = "true"
    out = m.on_pod(Change("modified", victim), now=2.0)
    assert len(out) == 1 and isinstance(out[0][0], CheckpointAcknowledged)
    assert out[0][1] == "c/checkpoint-ack/req-1/completed"


class _Api(BaseHTTPRequestHandler):
    """A loopback apiserver for one test: LIST and WATCH replay recorded objects; POSTs are kept."""

    pods: ClassVar[list[dict[str, Any]]] = []
    nodes: ClassVar[list[dict[str, Any]]] = []
    posts: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    patches: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    answers: ClassVar[dict[str, tuple[int, dict[str, Any]]]] = {}
    claims: ClassVar[dict[str, dict[str, Any]]] = {}
    gangs: ClassVar[dict[str, dict[str, Any]]] = {}

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(url.query)
        if url.path.startswith("/apis/gpuaware.io/v1alpha1/"):
            obj = type(self).gangs.get(url.path.rsplit("/", 1)[1])
            return self._send(200 if obj else 404, json.dumps(obj or {"kind": "Status", "code": 404}).encode())
        if url.path.startswith("/apis/resource.k8s.io/v1/"):
            name = url.path.rsplit("/", 1)[1]
            obj = type(self).claims.get(name)
            return self._send(200 if obj else 404, json.dumps(obj or {"kind": "Status", "code": 404}).encode())
        items = type(self).pods if url.path == "/api/v1/pods" else type(self).nodes
        if q.get("watch") == ["true"]:
            lines = b"".join(json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}})
                             .encode() + b"\n" for _ in range(1))
            return self._send(200, lines)
        self._send(200, json.dumps({"kind": "List", "metadata": {"resourceVersion": "10"}, "items": items}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        type(self).posts.append((self.path, body))
        status, data = type(self).answers.get(self.path.rsplit("/", 1)[-1],
                                              (201, {"kind": "Status", "status": "Success", "code": 201}))
        self._send(status, json.dumps(data).encode())

    def do_PATCH(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        type(self).patches.append((self.path, body))
        self._send(200, json.dumps(_pod("v")).encode())

    def log_message(self, *_a: Any) -> None:
        pass


@pytest.fixture
def kube() -> Iterator[Any]:
    _Api.pods, _Api.nodes, _Api.posts, _Api.patches, _Api.answers, _Api.claims = [], [], [], [], {}, {}
    _Api.gangs = {}
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield api.core_api(host=f"http://127.0.0.1:{srv.server_address[1]}")
    finally:
        srv.shutdown()
        srv.server_close()


def _decision(uid: str, node_name: str, victims: tuple[PlannedPreemption, ...] = ()) -> PlacementDecided:
    return PlacementDecided(source="p", emitted_at=0.0, cluster="c", decision_id=f"c/{uid}/0", pod_uid=uid,
                            pod_name=f"p-{uid}", namespace="ml-team-a", node=node_name,
                            slices=(GpuSlice(gpu_uuid="GPU-x", gpu_index=0, gpu_milli=300, memory_mib=10000),),
                            policy="GpuAware", score=50.0, decided_at=0.0, preemptions=victims)


async def test_kube_world_watches_binds_evicts(kube: Any) -> None:
    _Api.nodes = [node("gpu-node-07")]
    frac = _pod("a")
    res = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1", "nvidia.com/gpucores": "30",
           "nvidia.com/gpumem": "10000"}
    frac["spec"]["containers"][0]["resources"] = {"limits": res, "requests": res}
    victim = _pod("v", nodeName="gpu-node-07")
    victim["metadata"]["annotations"][ASSIGNED.GPU_UUIDS] = "gpu-node-07/gpu3"
    _Api.pods = [frac, victim]
    world = KubeWorld(kube, cluster="c", clock=lambda: 1000.0)
    emitted: list[tuple[Any, str]] = []
    stop = asyncio.Event()

    async def emit(ev: Any, msg_id: str) -> None:
        emitted.append((ev, msg_id))

    async def stopper() -> None:  # both LISTs applied (each watch runs on its own thread)
        while not (len(world.mirror.pods) == 2 and world.mirror.nodes and emitted):
            await asyncio.sleep(0.02)
        stop.set()

    await asyncio.wait_for(asyncio.gather(world.run(emit, stop), stopper()), timeout=30)
    assert [(type(e).__name__, i) for e, i in emitted] == [("PodPending", "c/pending/a/0")]
    pending: PodPending = emitted[0][0]
    assert (pending.gpu_milli, pending.gpu_memory_mib) == (300, 10000)
    assert await world.state("a") == "pending" and await world.state("v") == "bound"

    # placement's "why pending" as a Warning Event, once per attempt and reason
    why = PodUnschedulable(source="p", emitted_at=0.0, cluster="c", pod_uid="a", pod_name="p-a", namespace="ml-team-a",
                           reason="insufficient_gpu", message="0/1 nodes fit now",
                           node_classes=(NodeClassVerdict(node_class="8xA100/nvlink", nodes=1, feasible=0,
                                                          rejected={"insufficient_gpu": 1}),))
    await world.unschedulable(why)
    await world.unschedulable(why)
    failed = [p[1] for p in _Api.posts if p[0].endswith("/events") and p[1]["reason"] == "FailedScheduling"]
    assert len(failed) == 1 and failed[0]["type"] == "Warning"
    assert failed[0]["message"] == ("insufficient_gpu: 0/1 nodes fit now; "
                                    "8xA100/nvlink: 0/1 feasible (1 insufficient_gpu)")

    bound = await world.bind(_decision("a", "gpu-node-07"))
    assert bound.node == "gpu-node-07" and bound.slices[0].gpu_milli == 300
    path, body = next(p for p in _Api.posts if p[0].endswith("/binding"))
    assert path == "/api/v1/namespaces/ml-team-a/pods/p-a/binding"
    ann = body["metadata"]["annotations"]
    assert ann[ASSIGNED.HAMI_DEVICES] == "GPU-x,NVIDIA,10000,30:;" and ann[ASSIGNED.DECISION] == "c/a/0"
    assert any(p[0].endswith("/events") and p[1]["reason"] == "Scheduled" for p in _Api.posts)

    _Api.answers["binding"] = (409, load("binding/binding-response-409-already-assigned.json"))
    with pytest.raises(WorldRefused) as exc:
        await world.bind(_decision("a", "gpu-node-07"))
    assert exc.value.reason == "bound_elsewhere" and not exc.value.transient

    plan = PlannedPreemption(pod_uid="v", pod_name="p-v", namespace="ml-team-a", node="gpu-node-07",
                             reason="priority", grace_period_s=30.0)
    _Api.answers["eviction"] = (429, {"kind": "Status", "code": 429, "message": "would violate the disruption budget"})
    with pytest.raises(WorldRefused) as exc:
        await world.evict(plan, checkpointed=False, decision=_decision("a", "gpu-node-07", (plan,)))
    assert exc.value.reason == "disruption_budget" and exc.value.transient
    _Api.answers.pop("eviction")
    pre, again = await world.evict(plan, checkpointed=False, decision=_decision("a", "gpu-node-07", (plan,)))
    assert pre.pod_uid == "v" and again is None and [s.gpu_uuid for s in pre.slices] == ["gpu-node-07/gpu3"]
    assert list(world.mirror.job_preemptions.values()) == [1]  # counted against v's Job (once: it succeeded)

    await world.request_checkpoint(CheckpointRequested(
        source="b", emitted_at=0.0, cluster="c", request_id="req-1", pod_uid="v", pod_name="p-v",
        namespace="ml-team-a", node="gpu-node-07", reason="priority", deadline_s=30.0, requested_at=1000.0))
    path, patch = _Api.patches[0]
    assert path == "/api/v1/namespaces/ml-team-a/pods/p-v"
    assert patch["metadata"]["annotations"][ASSIGNED.CHECKPOINT_DEADLINE] == "1970-01-01T00:17:10Z"  # 1030 s


def test_a_replacement_pod_is_announced_with_its_jobs_preemptions() -> None:
    """An evicted pod's controller makes a new pod (new uid, attempt 0); the mirror counts evictions per
    controller and announces the replacement with its job's count. Bare pods have no job to count."""
    m = KubeMirror(cluster="c", source="t", max_jobs=2)
    for uid in ("first", "second"):
        m.on_pod(Change("added", _pod(uid, nodeName="gpu-node-07")), now=1.0)
        assert m.preempted(uid) == (1 if uid == "first" else 2)
    out = m.on_pod(Change("added", _pod("third")), now=2.0)
    assert [e.job_preemptions for e, _ in out] == [2]
    bare = _pod("bare", nodeName="gpu-node-07")
    bare["metadata"].pop("ownerReferences")
    m.on_pod(Change("added", bare), now=3.0)
    assert m.preempted("bare") == 0
    for k in range(3):  # three other jobs preempted: the first job's count is the oldest, dropped
        other = _pod(f"o{k}", nodeName="gpu-node-07")
        other["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": f"j{k}",
                                                 "uid": f"job-{k}", "controller": True}]
        m.on_pod(Change("added", other), now=4.0)
        m.preempted(f"o{k}")
    assert len(m.job_preemptions) == 2 and "b0e2d4c6-1a3f-4e5d-8c7b-9a0f1e2d3c4b" not in m.job_preemptions


def test_finished_event_of_a_deleted_bound_pod() -> None:
    m = KubeMirror(cluster="c", source="t")
    p = _pod("d", nodeName="n1")
    m.on_pod(Change("added", p), now=1.0)
    out = m.on_pod(Change("deleted", p), now=2.0)
    assert len(out) == 1 and isinstance(out[0][0], PodFinished) and out[0][0].outcome == "deleted"


async def test_dra_claim_templates_are_read_before_translation(kube: Any) -> None:
    import yaml
    from k8s_payloads import shared

    docs = [d for d in yaml.safe_load_all(shared("gpu-sharing/dra-nvidia-gpu-examples.yaml").read_text()) if d]
    _Api.claims = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    dra = copy.deepcopy(next(d for d in docs if d["kind"] == "Pod" and d["metadata"]["name"] == "pod1"))
    dra["metadata"].update(uid="dra-1", resourceVersion="1")
    dra["spec"]["schedulerName"] = "gpuaware"
    _Api.pods = [dra]
    world = KubeWorld(kube, cluster="c", clock=lambda: 1000.0)
    emitted: list[tuple[Any, str]] = []
    stop = asyncio.Event()

    async def emit(ev: Any, msg_id: str) -> None:
        emitted.append((ev, msg_id))
        stop.set()

    await asyncio.wait_for(world.run(emit, stop), timeout=30)
    assert emitted[0][1] == "c/pending/dra-1/0" and emitted[0][0].num_gpu == 1  # one gpu.nvidia.com device
    assert "gpu-test1/single-gpu" in world.mirror.claims and not world.mirror.refused


def test_extender_pods_are_reported_bound_once_never_pending() -> None:
    m = KubeMirror(cluster="c", source="t")
    m.on_node(Change("added", node("gpu-node-07")))
    p = _pod("x", schedulerName="gpuaware-extender")
    assert m.on_pod(Change("added", p), now=1.0) == []  # kube-scheduler's to place
    b = _pod("x", "2", schedulerName="gpuaware-extender", nodeName="gpu-node-07")
    b["metadata"]["annotations"].update({ASSIGNED.GPU_UUIDS: "gpu-node-07/gpu0", ASSIGNED.DECISION: "c/x/extender"})
    out = m.on_pod(Change("modified", b), now=2.0)
    assert [(type(e).__name__, i) for e, i in out] == [("PodBound", "c/bound/c/x/extender")]
    assert out[0][0].slices[0].gpu_uuid == "gpu-node-07/gpu0"
    assert m.on_pod(Change("modified", b), now=3.0) == []


class _Lease:
    """The KubeLeaderLease interface (tested in test_election.py), switched by hand."""

    def __init__(self) -> None:
        self.leading = False

    async def start(self) -> None:
        pass

    async def stop(self, release: bool = True) -> None:
        pass


async def test_standby_holds_events_until_it_leads(kube: Any) -> None:
    _Api.nodes = [node("gpu-node-07")]
    _Api.pods = [_pod("s1")]
    lease = _Lease()
    world = KubeWorld(kube, cluster="c", clock=lambda: 1000.0, lease=lease)
    emitted: list[str] = []
    stop = asyncio.Event()

    async def emit(_ev: Any, msg_id: str) -> None:
        emitted.append(msg_id)
        stop.set()

    async def promote() -> None:
        while "s1" not in world.mirror.pods:
            await asyncio.sleep(0.02)
        assert emitted == []  # a standby says nothing
        lease.leading = True

    await asyncio.wait_for(asyncio.gather(world.run(emit, stop), promote()), timeout=30)
    assert emitted == ["c/pending/s1/0"]  # said by the new leader, under the same id


async def test_gang_members_take_their_range_from_their_gpugang(kube: Any) -> None:
    _Api.gangs = {"llm": {"apiVersion": "gpuaware.io/v1alpha1", "kind": "GPUGang", "metadata": {"name": "llm"},
                          "spec": {"minMember": 4, "maxMember": 8}}}
    member = _pod("g1")
    member["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "llm"
    _Api.pods = [member]
    world = KubeWorld(kube, cluster="c", clock=lambda: 1000.0)
    emitted: list[Any] = []
    stop = asyncio.Event()

    async def emit(ev: Any, _msg_id: str) -> None:
        emitted.append(ev)
        stop.set()

    await asyncio.wait_for(world.run(emit, stop), timeout=30)
    assert (emitted[0].gang_id, emitted[0].gang_min_members, emitted[0].gang_max_members) == ("llm", 4, 8)
