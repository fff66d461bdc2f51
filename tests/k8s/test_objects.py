"""Our objects round-trip through the kubernetes client's models; Binding and Eviction answers are read
right, with the official client talking HTTP to a loopback server that replays the recorded bodies."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from k8s_payloads import load, shared
from kubernetes import client

from gpuaware.k8s import api
from gpuaware.k8s.leader import decide
from gpuaware.k8s.objects import (
    ASSIGNED,
    assignment_annotations,
    bind_outcome,
    binding,
    checkpoint_annotations,
    event,
    eviction,
    lease,
    to_json,
)
from gpuaware.schemas.placement import GpuSlice

NS, NAME, UID = "ml-team-a", "llm-train-7f9c4-0", "3f1c9a52-6d0e-4b8a-9b7e-2a51c0d4e8f1"


def _roundtrip(model: Any) -> None:
    data = to_json(model)
    again = type(model).from_dict(data)
    assert to_json(again) == data, type(model).__name__


def test_objects_roundtrip_through_the_client_models() -> None:
    slices = (GpuSlice(gpu_uuid="GPU-a", gpu_index=0, gpu_milli=300, memory_mib=10000),)
    _roundtrip(binding(NS, NAME, UID, "gpu-node-07", assignment_annotations("gpu-node-07", slices, now=1.0)))
    _roundtrip(event(namespace=NS, pod_name=NAME, pod_uid=UID, reason="FailedScheduling",
                     message="0/4 nodes available: 2 insufficient_gpu", now=1773480067.5, type_="Warning"))
    _roundtrip(eviction(NS, NAME, UID, 30))
    _roundtrip(lease("gpuaware-system", "placement", "pod-a", duration_s=15, now=1773480067.0))
    for rel in ("extender/object-pod-pending.json", "extender/object-node-dgx-a100.json"):
        obj = load(rel)
        model = (client.V1Pod if "pod" in rel else client.V1Node).from_dict(obj)
        assert to_json(model)["metadata"]["name"] == obj["metadata"]["name"]
        assert to_json(model)["spec"] == obj["spec"]  # nothing lost by the models


def test_binding_matches_the_recorded_request() -> None:
    rec = load("binding/binding-request.json")
    ann = rec["metadata"]["annotations"]
    assert to_json(binding(NS, NAME, UID, "gpu-node-07", ann)) == rec


def test_assignment_annotations_per_kind_of_slice() -> None:
    whole = (GpuSlice(gpu_uuid="GPU-a", gpu_index=0, gpu_milli=1000, memory_mib=81920),
             GpuSlice(gpu_uuid="GPU-b", gpu_index=1, gpu_milli=1000, memory_mib=81920))
    assert assignment_annotations("n", whole, decision_id="c/u/0") == {ASSIGNED.GPU_UUIDS: "GPU-a,GPU-b",
                                                                       ASSIGNED.DECISION: "c/u/0"}
    # a fraction: HAMi-core's device list, 300 milli = 30 % of the cores, one ';' segment per container
    pod = {"spec": {"containers": [{"name": "sidecar"},
                                   {"name": "main", "resources": {"limits": {"nvidia.com/gpucores": "30"}}}]}}
    frac = (GpuSlice(gpu_uuid="GPU-a", gpu_index=0, gpu_milli=300, memory_mib=10000),)
    a = assignment_annotations("n7", frac, pod=pod, now=1705054796.9)
    assert a[ASSIGNED.HAMI_DEVICES] == ";GPU-a,NVIDIA,10000,30:;"
    assert (a[ASSIGNED.HAMI_NODE], a[ASSIGNED.HAMI_TIME], a[ASSIGNED.HAMI_BIND_PHASE]) == ("n7", "1705054796",
                                                                                          "allocating")
    mig = (GpuSlice(gpu_uuid="GPU-a", gpu_index=0, gpu_milli=143, memory_mib=10240, mig_profile="1g.10gb+me"),)
    m = assignment_annotations("n", mig)
    assert m[ASSIGNED.MIG_RESOURCE] == "nvidia.com/mig-1g.10gb.me" and ASSIGNED.HAMI_DEVICES not in m
    hami = load_hami_format()
    assert a[ASSIGNED.HAMI_DEVICES].split(";")[1].count(",") == hami.split(";")[0].count(",")


def load_hami_format() -> str:
    import yaml

    docs = yaml.safe_load(shared("hami/hami-annotations-example.yaml").read_text())
    return docs["pod"]["metadata"]["annotations"][ASSIGNED.HAMI_DEVICES]


@pytest.mark.parametrize(("rel", "status", "ok", "reason", "node"), [
    ("binding/binding-response-201.json", 201, True, "", "gpu-node-07"),
    # already assigned to gpu-node-12: success when we bound it there, a conflict otherwise
    ("binding/binding-response-409-already-assigned.json", 409, True, "already_bound", "gpu-node-12"),
    ("binding/binding-response-409-already-assigned.json", 409, False, "bound_elsewhere", "gpu-node-07"),
    ("binding/binding-response-409-scheduling-gates.json", 409, False, "scheduling_gated", "gpu-node-07"),
    ("binding/binding-response-404.json", 404, False, "unknown_pod", "gpu-node-07"),
])
def test_bind_answers(rel: str, status: int, ok: bool, reason: str, node: str) -> None:
    out = bind_outcome(status, json.dumps(load(rel)).encode(), node)
    assert (out.ok, out.reason) == (ok, reason)
    if reason == "bound_elsewhere":
        assert out.node == "gpu-node-12" and not out.transient
    if reason == "scheduling_gated":
        assert out.transient


class _Replay(BaseHTTPRequestHandler):
    """Answers POSTs with the queued (status, body) and remembers what was sent."""

    answers: ClassVar[list[tuple[int, bytes]]] = []
    seen: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen.append((self.path, json.loads(body or b"{}")))
        status, data = type(self).answers.pop(0)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_a: Any) -> None:
        pass


@pytest.fixture
def replay() -> Iterator[tuple[type[_Replay], client.CoreV1Api]]:
    _Replay.answers, _Replay.seen = [], []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Replay)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield _Replay, api.core_api(host=f"http://127.0.0.1:{srv.server_address[1]}")
    finally:
        srv.shutdown()
        srv.server_close()


def test_bind_through_the_official_client(replay: tuple[type[_Replay], client.CoreV1Api]) -> None:
    rec, core = replay
    ok = json.dumps(load("binding/binding-response-201.json")).encode()
    gone = json.dumps(load("binding/binding-response-409-already-assigned.json")).encode()
    rec.answers = [(201, ok), (409, gone), (409, gone)]
    ann = {ASSIGNED.GPU_UUIDS: "GPU-a"}
    # 201 with a Status body: success although the client's V1Binding model could not read it
    assert api.bind(core, NS, NAME, UID, "gpu-node-07", ann).ok
    path, body = rec.seen[0]
    assert path == f"/api/v1/namespaces/{NS}/pods/{NAME}/binding"
    assert body["metadata"]["uid"] == UID and body["target"] == {"apiVersion": "v1", "kind": "Node",
                                                                 "name": "gpu-node-07"}
    assert body["metadata"]["annotations"] == ann
    assert api.bind(core, NS, NAME, UID, "gpu-node-12").reason == "already_bound"
    assert api.bind(core, NS, NAME, UID, "gpu-node-07").reason == "bound_elsewhere"


def test_evict_through_the_official_client(replay: tuple[type[_Replay], client.CoreV1Api]) -> None:
    rec, core = replay
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    pdb = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429, "reason": "TooManyRequests",
           "message": "Cannot evict pod as it would violate the pod's disruption budget."}
    rec.answers = [(201, json.dumps(status).encode()), (429, json.dumps(pdb).encode()),
                   (404, json.dumps({"message": "pods \"x\" not found"}).encode())]
    assert api.evict(core, NS, NAME, UID, 30)[0] == api.EvictOutcome.EVICTED
    assert rec.seen[0][0] == f"/api/v1/namespaces/{NS}/pods/{NAME}/eviction"
    assert rec.seen[0][1]["deleteOptions"]["preconditions"] == {"uid": UID}
    out, msg = api.evict(core, NS, NAME, UID)
    assert out == api.EvictOutcome.BLOCKED and "disruption budget" in msg
    assert api.evict(core, NS, NAME, UID)[0] == api.EvictOutcome.GONE


def test_lease_election_steps() -> None:
    kw = {"namespace": "gpuaware-system", "name": "placement", "duration_s": 15}
    first = decide(None, me="a", now=100.0, **kw)
    assert first.action == "create"
    held = to_json(first.body)
    held["metadata"]["resourceVersion"] = "7"
    assert decide(held, me="a", now=105.0, **kw).action == "renew"
    wait = decide(held, me="b", now=110.0, **kw)  # renewed at 100, valid until 115
    assert (wait.action, wait.holder) == ("wait", "a")
    take = decide(held, me="b", now=115.0, **kw)
    assert take.action == "take" and take.body.spec.lease_transitions == 1
    assert take.body.metadata.resource_version == "7"  # optimistic: a concurrent taker gets 409


def test_checkpoint_handshake_annotations() -> None:
    a = checkpoint_annotations(1773480097.0, 1773480067.0)
    assert a == {ASSIGNED.CHECKPOINT_REQUESTED: "2026-03-14T09:21:07Z",
                 ASSIGNED.CHECKPOINT_DEADLINE: "2026-03-14T09:21:37Z"}
