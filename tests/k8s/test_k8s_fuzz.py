"""Fuzzing (hypothesis) what faces the Kubernetes API: the extender's endpoint, pod and node
translation (annotations, resources, HAMi registrations), the admission webhooks and the custom
resources. Starting from the real recorded payloads in ../shared/k8s, every field is replaced by
arbitrary JSON or strings; what must hold:

* the extender answers every body with a response object, or refuses it with ``BadRequest`` (a 400
  with the reason) - never another exception (which the server turns into a 500-shaped answer);
* a pod or node becomes a contract event or raises ``TranslationError`` naming the field;
* a review is answered (allowed, or refused with a message) or raises ``BadReview``;
* custom resources become a configuration or raise ``CustomResourceError`` naming the object.

Bounded in `make test`; `make fuzz` runs it with 5,000 examples per property.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
from extender_world import extender, state
from hypothesis import given
from hypothesis import strategies as st
from k8s_payloads import load, node

from gpuaware.k8s.admission import BadReview, mutate, validate
from gpuaware.k8s.crs import CustomResourceError, policy_profile, quota_config
from gpuaware.k8s.extender import BadRequest
from gpuaware.k8s.nodes import node_inventory
from gpuaware.k8s.translate import ANNOTATION, HAMI_REGISTER, TranslationError, pod_pending

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=15), inner, max_size=5),
    max_leaves=25)
ANNOTATIONS = [v for k, v in vars(ANNOTATION).items() if k.isupper()]
QUANTITY = st.one_of(st.text(max_size=12), st.from_regex(r"-?[0-9]{1,25}(\.[0-9]{1,5})?(m|Ki|Mi|Gi|Ti|k|M|G|e[0-9])?",
                                                          fullmatch=True), JSON)
enc = msgspec.json.Encoder()
EXT = None


def _extender() -> Any:
    global EXT
    if EXT is None:
        EXT = extender(state())
    return EXT


def _mutate(obj: Any, data: st.DataObject, depth: int = 0) -> Any:
    """Replace a few fields anywhere in ``obj`` with arbitrary JSON (or drop them)."""
    if isinstance(obj, dict) and obj and depth < 6:
        for key in data.draw(st.lists(st.sampled_from(sorted(obj)), max_size=2, unique=True)):
            choice = data.draw(st.integers(0, 2))
            if choice == 0:
                obj[key] = data.draw(JSON)
            elif choice == 1:
                del obj[key]
            else:
                obj[key] = _mutate(obj[key], data, depth + 1)
    elif isinstance(obj, list) and obj and depth < 6:
        i = data.draw(st.integers(0, len(obj) - 1))
        obj[i] = _mutate(obj[i], data, depth + 1) if data.draw(st.booleans()) else data.draw(JSON)
    return obj


def _answers(verb: str, body: bytes) -> None:
    try:
        out = _extender().answer(verb, body)
    except BadRequest as exc:
        assert str(exc)
        return
    enc.encode(out)  # whatever is answered can be written back to kube-scheduler


@given(verb=st.sampled_from(["filter", "prioritize", "preempt", "bind"]), body=st.binary(max_size=300))
def test_the_extender_answers_any_bytes_or_refuses_them_with_a_reason(verb: str, body: bytes) -> None:
    _answers(verb, body)


@given(verb=st.sampled_from(["filter", "prioritize", "preempt", "bind"]), data=st.data())
def test_the_extender_answers_mangled_recorded_requests_or_refuses_them(verb: str, data: st.DataObject) -> None:
    recorded = {"filter": "extender/filter-request.json", "prioritize": "extender/prioritize-request.json",
                "preempt": "extender/preempt-request.json", "bind": "extender/bind-request.json"}[verb]
    args = _mutate(copy.deepcopy(load(recorded)), data)
    if isinstance(args, dict) and data.draw(st.booleans()):
        args = {(k.lower() if data.draw(st.booleans()) else k.upper()): v for k, v in args.items()}
    _answers(verb, json.dumps(args, default=str).encode())


@given(data=st.data())
def test_a_pod_with_any_annotations_and_resources_translates_or_names_the_field(data: st.DataObject) -> None:
    pod = copy.deepcopy(load("extender/object-pod-pending.json"))
    ann = pod.setdefault("metadata", {}).setdefault("annotations", {})
    for key in data.draw(st.lists(st.sampled_from(ANNOTATIONS), max_size=4, unique=True)):
        ann[key] = data.draw(st.text(max_size=20) | st.sampled_from(["true", "0", "-1", "1e400", "nan", "3g.40gb"]))
    resources = pod["spec"]["containers"][0].setdefault("resources", {})
    for kind in ("limits", "requests"):
        bucket = resources.setdefault(kind, {})
        for name in data.draw(st.lists(st.sampled_from(["nvidia.com/gpu", "cpu", "memory", "nvidia.com/gpumem",
                                                        "nvidia.com/gpucores", "nvidia.com/mig-1g.10gb"]),
                                       max_size=3, unique=True)):
            bucket[name] = data.draw(QUANTITY)
    if data.draw(st.booleans()):
        pod = _mutate(pod, data)
    try:
        ev = pod_pending(pod, source="binder/k8s", cluster="c", emitted_at=1.0)
    except TranslationError as exc:
        assert str(exc)
        return
    msgspec.json.decode(msgspec.json.encode(ev), type=type(ev))  # what comes out is a valid contract event


@given(data=st.data())
def test_a_node_with_any_labels_and_hami_registration_translates_or_names_the_field(data: st.DataObject) -> None:
    obj = node("n1")
    ann = obj.setdefault("metadata", {}).setdefault("annotations", {})
    if data.draw(st.booleans()):
        ann[HAMI_REGISTER] = data.draw(
            st.text(max_size=60) | st.builds(lambda d: json.dumps(d, default=str), JSON)
            | st.just('[{"id":"GPU-1","count":10,"devmem":81920,"devcore":100,"type":"A100","numa":0,'
                      '"health":true}]'))
    labels = obj["metadata"].setdefault("labels", {})
    for key in data.draw(st.lists(st.sampled_from(["nvidia.com/gpu.count", "nvidia.com/gpu.memory",
                                                   "nvidia.com/gpu.product", "nvidia.com/mig.strategy",
                                                   "nvidia.com/gpu.compute.major"]), max_size=3, unique=True)):
        labels[key] = data.draw(st.text(max_size=20))
    if data.draw(st.booleans()):
        obj = _mutate(obj, data)
    try:
        inv = node_inventory(obj, source="binder/k8s", cluster="c")
    except TranslationError as exc:
        assert str(exc)
        return
    msgspec.json.decode(msgspec.json.encode(inv), type=type(inv))


@given(data=st.data(), which=st.sampled_from(["mutate", "validate"]))
def test_a_review_is_answered_or_refused_with_a_reason(data: st.DataObject, which: str) -> None:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u1", "operation": "CREATE", "kind": {"kind": "Pod", "version": "v1"},
                          "namespace": "ns", "object": copy.deepcopy(load("extender/object-pod-pending.json"))}}
    review = _mutate(review, data) if data.draw(st.booleans()) else data.draw(JSON)
    try:
        out = (mutate if which == "mutate" else validate)(review)
    except BadReview as exc:
        assert str(exc)
        return
    resp = out["response"]
    assert isinstance(resp["allowed"], bool)
    assert resp["allowed"] or resp["status"]["message"]  # a refusal always says why
    json.dumps(out)


@given(objs=st.lists(st.dictionaries(st.sampled_from(["metadata", "spec", "kind"]), JSON, max_size=3), max_size=4),
       policy=JSON)
def test_custom_resources_become_a_configuration_or_name_the_object(objs: list[Any], policy: Any) -> None:
    try:
        quota_config(objs)
    except CustomResourceError as exc:
        assert str(exc)
    obj = {"metadata": {"name": "p"}, "spec": policy}
    try:
        policy_profile(obj)
    except CustomResourceError as exc:
        assert str(exc)
