"""Every payload in ../shared/k8s/extender decoded and answered as extender-protocol.md says, through
the answers and through the HTTP server; bad input is a 400 with the reason, never a 500."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer
from extender_world import extender, state
from k8s_payloads import load, shared

from gpuaware.k8s.extender import BadRequest, FilterResult, decode_args
from gpuaware.k8s.objects import ASSIGNED, BindOutcome
from gpuaware.k8s.server import extender_app
from gpuaware.schemas.binder import PodBound
from gpuaware.schemas.placement import GpuSlice

enc = msgspec.json.Encoder()


def _answer(ext: Any, verb: str, obj: Any) -> Any:
    return json.loads(enc.encode(ext.answer(verb, json.dumps(obj).encode())))


def test_filter_recorded_request_matches_recorded_response_shape() -> None:
    ext = extender(state())
    got = _answer(ext, "filter", load("extender/filter-request.json"))
    want = load("extender/filter-response.json")
    assert list(got) == list(want)  # the five capitalised keys, in Go's order
    assert got["NodeNames"] == want["NodeNames"] == ["gpu-node-07", "gpu-node-12"]
    assert list(got["FailedNodes"]) == ["gpu-node-08"]  # 1 GPU free, 2 asked: full now
    assert got["FailedNodes"]["gpu-node-08"].startswith("insufficient_gpu")
    assert list(got["FailedAndUnresolvableNodes"]) == ["gpu-node-11"]  # 1 GPU: never
    assert got["FailedAndUnresolvableNodes"]["gpu-node-11"].startswith("too_few_gpus")
    assert got["Nodes"] is None and got["Error"] == ""


def test_filter_with_full_node_list_and_any_key_case() -> None:
    ext = extender(state())
    req = load("extender/filter-request-nodelist.json")
    names = [n["metadata"]["name"] for n in req["Nodes"]["items"]]
    extra = {n: 8 for n in names}
    ext = extender(state({**extra, "gpu-node-08": 8}, busy={}))
    got = _answer(ext, "filter", req)
    assert got["NodeNames"] == names
    # Go's decoder matches keys case-insensitively; so do we
    lower = {k.lower(): v for k, v in load("extender/filter-request.json").items()}
    ext = extender(state())
    assert _answer(ext, "filter", lower)["NodeNames"] == ["gpu-node-07", "gpu-node-12"]


def test_prioritize_scores_are_0_to_10_for_the_asked_hosts() -> None:
    ext = extender(state())
    got = _answer(ext, "prioritize", load("extender/prioritize-request.json"))
    want = load("extender/prioritize-response.json")
    assert [h["Host"] for h in got] == [h["Host"] for h in want]
    assert all(set(h) == {"Host", "Score"} and 0 <= h["Score"] <= 10 for h in got)
    # the busier node packs better for a 2-GPU pod under the default profile: 08 has 1 GPU free (infeasible,
    # 0); with 07 half full and 12 empty, 07 scores at least as high as 12
    st = state(busy={"gpu-node-07": 4})
    got = _answer(extender(st), "prioritize", load("extender/prioritize-request.json"))
    s = {h["Host"]: h["Score"] for h in got}
    assert s["gpu-node-07"] >= s["gpu-node-12"]


def test_preempt_meta_and_full_forms_answer_in_meta_form() -> None:
    ext = extender(state())
    req = load("extender/preempt-request.json")
    got = _answer(ext, "preempt", req)
    assert list(got) == ["NodeNameToMetaVictims"]
    # gpu-node-11 can never hold 2 GPUs: vetoed (omitted); gpu-node-08's victims are kept, by UID
    assert list(got["NodeNameToMetaVictims"]) == ["gpu-node-08"]
    want = req["NodeNameToMetaVictims"]["gpu-node-08"]
    assert got["NodeNameToMetaVictims"]["gpu-node-08"] == want
    full = _answer(ext, "preempt", load("extender/preempt-request-fullpods.json"))
    victims = full["NodeNameToMetaVictims"]["gpu-node-08"]["Pods"]
    uids = [p["metadata"]["uid"] for p in load("extender/preempt-request-fullpods.json")
            ["NodeNameToVictims"]["gpu-node-08"]["Pods"]]
    assert [v["UID"] for v in victims] == uids
    resp = load("extender/preempt-response.json")
    assert set(resp["NodeNameToMetaVictims"]["gpu-node-08"]) == set(got["NodeNameToMetaVictims"]["gpu-node-08"])


def test_bind_recorded_request_binds_with_assignment_annotations() -> None:
    bound: list[tuple[Any, ...]] = []
    ext = extender(state(), bound)
    _answer(ext, "filter", load("extender/filter-request.json"))  # remembers the pod
    got = _answer(ext, "bind", load("extender/bind-request.json"))
    assert got == load("extender/bind-response.json")
    ns, name, uid, node, ann = bound[0]
    assert (ns, name, node) == ("ml-team-a", "llm-train-7f9c4-0", "gpu-node-07")
    assert uid == "3f1c9a52-6d0e-4b8a-9b7e-2a51c0d4e8f1"
    assert len(ann[ASSIGNED.GPU_UUIDS].split(",")) == 2  # two whole GPUs of gpu-node-07, by id


def test_bind_commits_to_the_view_through_on_bound() -> None:
    st = state()
    ext = extender(st, [])
    got: list[Any] = []
    ext.on_bound = lambda b, slices, decision: got.append((b.node, len(slices), decision))
    _answer(ext, "filter", load("extender/filter-request.json"))
    _answer(ext, "bind", load("extender/bind-request.json"))
    assert got == [("gpu-node-07", 2, "c/3f1c9a52-6d0e-4b8a-9b7e-2a51c0d4e8f1/extender")]


def test_bind_refused_by_the_apiserver_is_an_error_answer() -> None:
    err = load("extender/bind-response-error.json")["Error"]
    ext = extender(state(), outcome=BindOutcome(False, "bound_elsewhere", err))
    assert _answer(ext, "bind", load("extender/bind-request.json")) == {"Error": err}


def test_every_recorded_payload_decodes() -> None:
    for verb, rel in [("filter", "filter-request.json"), ("filter", "filter-request-nodelist.json"),
                      ("prioritize", "prioritize-request.json"), ("preempt", "preempt-request.json"),
                      ("preempt", "preempt-request-fullpods.json"), ("bind", "bind-request.json")]:
        args = decode_args(verb, shared(f"extender/{rel}").read_bytes())
        assert args, rel
    for rel in ("filter-response.json", "filter-response-error.json"):
        r = msgspec.json.decode(shared(f"extender/{rel}").read_bytes(), type=FilterResult)
        assert json.loads(enc.encode(r)) == load(f"extender/{rel}")  # our struct speaks exactly their keys


@pytest.mark.parametrize(("verb", "body", "match"), [
    ("filter", b"{not json", "not JSON"),
    ("filter", b"[1, 2]", "expected a JSON object"),
    ("unbind", b"{}", "unknown verb"),
    ("filter", b'{"NodeNames": ["gpu-node-07"]}', "no Pod"),
])
def test_bad_requests_are_refused_with_the_reason(verb: str, body: bytes, match: str) -> None:
    with pytest.raises(BadRequest, match=match):
        extender(state()).answer(verb, body)


def test_unknown_nodes_and_bad_pods_are_bad_requests() -> None:
    ext = extender(state())
    req = load("extender/filter-request.json")
    req["NodeNames"] = ["gpu-node-07", "ghost-1"]
    with pytest.raises(BadRequest, match="not in the extender's cache: ghost-1"):
        _answer(ext, "filter", req)
    req = load("extender/filter-request.json")
    for part in ("limits", "requests"):
        req["Pod"]["spec"]["containers"][0]["resources"][part]["nvidia.com/gpu"] = "lots"
    req["Pod"]["metadata"]["resourceVersion"] = "48213978"  # a changed pod has a new version
    with pytest.raises(BadRequest, match="not a Kubernetes quantity"):
        _answer(ext, "filter", req)
    b = load("extender/bind-request.json")
    del b["Node"]
    with pytest.raises(BadRequest, match="Node"):
        _answer(ext, "bind", b)


async def test_http_server_codes() -> None:
    ext = extender(state())
    async with TestClient(TestServer(extender_app(ext, max_body=256 << 10))) as c:
        r = await c.post("/filter", data=shared("extender/filter-request.json").read_bytes(),
                         headers={"Content-Type": "application/json"})
        assert r.status == 200 and (await r.json())["NodeNames"] == ["gpu-node-07", "gpu-node-12"]
        r = await c.post("/prioritize", data=shared("extender/prioritize-request.json").read_bytes())
        assert r.status == 200 and len(await r.json()) == 2
        for path, body, match in [("/filter", b"{oops", "not JSON"), ("/frobnicate", b"{}", "unknown verb"),
                                  ("/filter", b"x" * (300 << 10), "request body over")]:
            r = await c.post(path, data=body)
            assert r.status == 400, path
            assert match in (await r.json())["Error"]
        bad = copy.deepcopy(load("extender/filter-request.json"))
        bad["NodeNames"] = ["nowhere"]
        r = await c.post("/filter", data=json.dumps(bad))
        assert r.status == 400 and "nowhere" in (await r.json())["Error"]
        assert (await c.get("/healthz")).status == 200


def test_prioritize_after_filter_reuses_the_scores_until_the_cluster_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    # kube-scheduler asks filter then prioritize for the same pod object: one scoring pass serves both,
    # and any change of the cluster in between (a pod bound) makes prioritize score again
    st = state(busy={"gpu-node-07": 4})
    ext = extender(st)
    fw = st.planner.framework if st.planner.ensure_cluster() else None
    assert fw is not None
    calls: list[int] = []
    real = fw.scheduler.scores

    def counted(req: Any, snap: Any) -> Any:
        calls.append(1)
        return real(req, snap)

    monkeypatch.setattr(fw.scheduler, "scores", counted)
    req = load("extender/filter-request.json")
    passed = _answer(ext, "filter", req)["NodeNames"]
    first = _answer(ext, "prioritize", {"Pod": req["Pod"], "NodeNames": passed})
    assert len(calls) == 1
    st.apply_bound(PodBound(source="binder", emitted_at=0.0, cluster="c", pod_uid="late", pod_name="late",
                            namespace="ns", node="gpu-node-12", bound_at=0.0,
                            slices=(GpuSlice(gpu_uuid="gpu-node-12/gpu0", gpu_index=0, gpu_milli=1000,
                                             memory_mib=81920),)))
    again = _answer(ext, "prioritize", {"Pod": req["Pod"], "NodeNames": passed})
    assert len(calls) == 2 and [h["Host"] for h in again] == [h["Host"] for h in first]
    other = copy.deepcopy(req["Pod"])
    other["metadata"]["resourceVersion"] = "48213978"  # the pod changed: its own scores
    _answer(ext, "prioritize", {"Pod": other, "NodeNames": passed})
    assert len(calls) == 3
