"""Admission webhooks: the mutating defaults and opt-in, the validating refusals with their reasons,
and the HTTP front (bad reviews are 400, never 500)."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from k8s_payloads import load, pod

from gpuaware.k8s.admission import BadReview, mutate, validate
from gpuaware.k8s.server import admission_app


def _review(obj: dict[str, Any], kind: str = "Pod", operation: str = "CREATE") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": operation,
                        "kind": {"group": "" if kind == "Pod" else "gpuaware.io", "version": "v1", "kind": kind},
                        "namespace": "ml-team-a", "object": obj}}


def _patch(resp: dict[str, Any]) -> list[dict[str, Any]]:
    r = resp["response"]
    return json.loads(base64.b64decode(r["patch"])) if "patch" in r else []


def test_mutate_opts_gpu_pods_in_and_defaults_the_queue() -> None:
    p = pod(**{"nvidia.com/gpu": "1"})
    del p["spec"]["schedulerName"]
    p["metadata"]["annotations"].pop("gpu-platform.example.com/queue")
    resp = mutate(_review(p), default_queue="team-a")
    assert resp["response"]["allowed"] and resp["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert _patch(resp) == [{"op": "add", "path": "/spec/schedulerName", "value": "gpuaware"},
                            {"op": "add", "path": "/metadata/annotations/gpuaware.io~1queue", "value": "team-a"}]
    # another scheduler chosen on purpose (the recorded pod's gpu-scheduler) is left alone
    q = load("extender/object-pod-pending.json")
    assert [op["path"] for op in _patch(mutate(_review(q)))] == ["/metadata/annotations/gpuaware.io~1queue"]
    # a CPU pod is not touched
    assert _patch(mutate(_review(pod()))) == []


def test_validate_refuses_bad_gpu_requests_with_the_reason() -> None:
    good = pod(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"})
    assert validate(_review(good))["response"]["allowed"]
    bad = copy.deepcopy(good)
    bad["metadata"]["annotations"]["gpuaware.io/topology"] = "same-planet"
    r = validate(_review(bad))["response"]
    assert not r["allowed"] and r["status"]["code"] == 400 and "same-planet" in r["status"]["message"]
    many = pod(**{"nvidia.com/gpu": "2", "nvidia.com/gpucores": "50"})
    assert "gpu_milli" in validate(_review(many))["response"]["status"]["message"]


@pytest.mark.parametrize(("kind", "spec", "allowed", "reason"), [
    ("GPUQueue", {"name": "team-a", "guaranteed": {"A100": {"gpus": 8}}}, True, ""),
    ("GPUQueue", {"name": "team-a", "weight": -1}, False, "weight"),
    ("GPUQueue", {"name": "team-a", "colour": "red"}, False, "colour"),
    ("GPUPolicy", {"score": [{"name": "fgd", "weight": 1000}], "gpu": "fgd"}, True, ""),
    ("GPUPolicy", {"score": [{"name": "nope", "weight": 1}]}, False, "nope"),
    ("GPUGang", {"minMember": 4}, True, ""),
    ("GPUGang", {"minMember": 0}, False, "minMember"),
])
def test_validate_crds_with_the_services_own_checks(kind: str, spec: Any, allowed: bool, reason: str) -> None:
    r = validate(_review({"apiVersion": "gpuaware.io/v1alpha1", "kind": kind, "metadata": {"name": "x"},
                          "spec": spec}, kind=kind))["response"]
    assert r["allowed"] is allowed
    if not allowed:
        assert reason in r["status"]["message"]


def test_bad_reviews() -> None:
    for bad in ({}, {"kind": "AdmissionReview"}, {"kind": "AdmissionReview", "request": {"uid": "u"}}, []):
        with pytest.raises(BadReview):
            validate(bad)


async def test_admission_http() -> None:
    async with TestClient(TestServer(admission_app())) as c:
        bad = pod(**{"nvidia.com/gpu": "1"})
        bad["metadata"]["annotations"]["gpuaware.io/checkpointable"] = "perhaps"
        r = await c.post("/validate", json=_review(bad))
        assert r.status == 200
        body = await r.json()
        assert not body["response"]["allowed"] and "perhaps" in body["response"]["status"]["message"]
        r = await c.post("/mutate", json=_review(pod(**{"nvidia.com/gpu": "1"})))
        assert r.status == 200 and (await r.json())["response"]["allowed"]
        for path, data in [("/validate", b"{nope"), ("/mutate", b"[]")]:
            r = await c.post(path, data=data)
            assert r.status == 400 and (await r.json())["error"]
