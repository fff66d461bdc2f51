"""Elastic gangs on the Kubernetes face: a job's worker range (``gpuaware.io/gang-min-members`` /
``gang-max-members``, or its GPUGang's ``minMember`` / ``maxMember``) read from the recorded pod, carried
to placement's request, and every invalid range refused with its reason by the translation (the
watcher's path) and by the admission webhook."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest
from k8s_payloads import load, pod

from gpuaware.k8s.admission import validate
from gpuaware.k8s.crds import GangSpec
from gpuaware.k8s.translate import ANNOTATION, POD_GROUP_LABEL, TranslationError, pod_pending
from gpuaware.services.placement.convert import pod_request


def _member(gang: str | None = "llm", **ann: str) -> dict[str, Any]:
    """The recorded torchrun pod (an indexed Job's worker, two GPUs) with gpuaware annotations."""
    p = copy.deepcopy(load("extender/object-pod-pending.json"))
    if gang is not None:
        p["metadata"]["annotations"][ANNOTATION.GANG] = gang
    p["metadata"]["annotations"].update(ann)
    return p


def _review(obj: dict[str, Any], kind: str = "Pod") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": "CREATE",
                        "kind": {"group": "" if kind == "Pod" else "gpuaware.io", "version": "v1", "kind": kind},
                        "namespace": "ml-team-a", "object": obj}}


def test_annotated_range_translates_to_min_and_max_members() -> None:
    e = pod_pending(_member(**{ANNOTATION.GANG_MIN_MEMBERS: "2", ANNOTATION.GANG_MAX_MEMBERS: "6"}), source="t")
    assert (e.gang_id, e.gang_min_members, e.gang_max_members, e.num_gpu) == ("llm", 2, 6, 2)


def test_a_gang_without_a_maximum_stays_fixed() -> None:
    e = pod_pending(_member(**{ANNOTATION.GANG_MIN_MEMBERS: "4"}), source="t")
    assert (e.gang_min_members, e.gang_max_members) == (4, 0)
    assert not pod_request(e).elastic
    assert pod_pending(load("extender/object-pod-pending.json"), source="t").gang_max_members == 0


def test_torchrun_elastic_worker_becomes_an_elastic_placement_request() -> None:
    """An indexed Job of torchrun workers (``--nnodes=2:6``): the controller creates six workers, each
    naming the gang and its range; placement sees each as a member of an elastic gang of 2..6."""
    p = _member("llm-train-7f9c4", **{ANNOTATION.GANG_MIN_MEMBERS: "2", ANNOTATION.GANG_MAX_MEMBERS: "6",
                                      ANNOTATION.CHECKPOINTABLE: "true"})
    p["spec"]["containers"][0]["command"] = ["torchrun", "--nnodes=2:6", "--nproc_per_node=2",
                                             "--rdzv-backend=c10d", "--rdzv-endpoint=llm-train-7f9c4-0:29400",
                                             "train.py"]
    r = pod_request(pod_pending(p, source="t"))
    assert (r.gang_id, r.gang_min_members, r.gang_max_members, r.num_gpu) == ("llm-train-7f9c4", 2, 6, 2)
    assert r.elastic and r.checkpointable


def test_pod_group_label_gang_takes_a_maximum_too() -> None:
    p = _member(None, **{ANNOTATION.GANG_MIN_MEMBERS: "2", ANNOTATION.GANG_MAX_MEMBERS: "4"})
    p["metadata"]["labels"][POD_GROUP_LABEL] = "llm-train"
    e = pod_pending(p, source="t")
    assert (e.gang_id, e.gang_min_members, e.gang_max_members) == ("llm-train", 2, 4)


def test_gpugang_max_member_applies_where_the_pod_is_silent() -> None:
    gangs = {"llm": {"minMember": 2, "maxMember": 6}}
    e = pod_pending(_member(), source="t", gangs=gangs)
    assert (e.gang_min_members, e.gang_max_members) == (2, 6)
    own = pod_pending(_member(**{ANNOTATION.GANG_MAX_MEMBERS: "3"}), source="t", gangs=gangs)
    assert (own.gang_min_members, own.gang_max_members) == (2, 3)  # the pod's own word wins
    fixed = pod_pending(_member(), source="t", gangs={"llm": {"minMember": 2}})
    assert fixed.gang_max_members == 0


INVALID = [
    ({ANNOTATION.GANG_MIN_MEMBERS: "4", ANNOTATION.GANG_MAX_MEMBERS: "2"}, "llm",
     "most members 2 (gpuaware.io/gang-max-members or GPUGang spec.maxMember) is below its fewest 4"),
    ({ANNOTATION.GANG_MAX_MEMBERS: "six"}, "llm", "gpuaware.io/gang-max-members: 'six' is not an integer"),
    ({ANNOTATION.GANG_MAX_MEMBERS: "2.5"}, "llm", "gpuaware.io/gang-max-members: '2.5' is not an integer"),
    ({ANNOTATION.GANG_MAX_MEMBERS: "-3"}, "llm", "gpuaware.io/gang-max-members: -3 is outside 1..4096"),
    ({ANNOTATION.GANG_MAX_MEMBERS: "0"}, "llm", "gpuaware.io/gang-max-members: 0 is outside 1..4096"),
    ({ANNOTATION.GANG_MAX_MEMBERS: "5000"}, "llm", "gpuaware.io/gang-max-members: 5000 is outside 1..4096"),
    ({ANNOTATION.GANG_MAX_MEMBERS: "4"}, None, "gpuaware.io/gang-max-members: 4 needs a gang"),
]


@pytest.mark.parametrize(("ann", "gang", "reason"), INVALID)
def test_invalid_range_is_refused_by_translation_with_its_reason(ann: dict[str, str], gang: str | None,
                                                                 reason: str) -> None:
    with pytest.raises(TranslationError) as exc:
        pod_pending(_member(gang, **ann), source="t")
    assert reason in str(exc.value)


@pytest.mark.parametrize(("ann", "gang", "reason"), INVALID)
def test_invalid_range_is_refused_at_admission_with_its_reason(ann: dict[str, str], gang: str | None,
                                                               reason: str) -> None:
    r = validate(_review(_member(gang, **ann)))["response"]
    assert not r["allowed"] and r["status"]["code"] == 400
    assert r["status"]["message"].startswith("gpuaware: ") and reason in r["status"]["message"]


def test_valid_range_is_admitted() -> None:
    ok = _member(**{ANNOTATION.GANG_MIN_MEMBERS: "2", ANNOTATION.GANG_MAX_MEMBERS: "6"})
    assert validate(_review(ok))["response"]["allowed"]
    equal = _member(**{ANNOTATION.GANG_MIN_MEMBERS: "3", ANNOTATION.GANG_MAX_MEMBERS: "3"})
    assert validate(_review(equal))["response"]["allowed"]


def test_gpugang_below_its_minimum_with_the_pods_own_maximum_is_refused() -> None:
    """A range split between the GPUGang and the pod's annotation is checked whole."""
    with pytest.raises(TranslationError, match=r"most members 3 .* below its fewest 4"):
        pod_pending(_member(**{ANNOTATION.GANG_MAX_MEMBERS: "3"}), source="t", gangs={"llm": {"minMember": 4}})


@pytest.mark.parametrize(("spec", "reason"), [
    ({"minMember": 4, "maxMember": 2}, "maxMember 2 is below minMember 4"),
    ({"minMember": 2, "maxMember": 0}, "Expected `int` >= 1 - at `$.maxMember`"),
    ({"minMember": 2, "maxMember": -1}, "Expected `int` >= 1 - at `$.maxMember`"),
    ({"minMember": 2, "maxMember": "six"}, "got `str` - at `$.maxMember`"),
    ({"minMember": 2, "maxMember": 2.5}, "got `float` - at `$.maxMember`"),
])
def test_invalid_gpugang_is_refused_at_admission_with_its_reason(spec: dict[str, Any], reason: str) -> None:
    obj = {"apiVersion": "gpuaware.io/v1alpha1", "kind": "GPUGang", "metadata": {"name": "llm"}, "spec": spec}
    r = validate(_review(obj, kind="GPUGang"))["response"]
    assert not r["allowed"] and r["status"]["code"] == 400
    assert r["status"]["message"].startswith("gpuaware: GPUGang spec: ") and reason in r["status"]["message"]


def test_valid_gpugang_range_is_admitted_and_decodes() -> None:
    obj = {"apiVersion": "gpuaware.io/v1alpha1", "kind": "GPUGang", "metadata": {"name": "llm"},
           "spec": {"minMember": 2, "maxMember": 6}}
    assert validate(_review(obj, kind="GPUGang"))["response"]["allowed"]
    assert msgspec.convert(obj["spec"], GangSpec).max_member == 6
    assert msgspec.convert({"minMember": 2}, GangSpec).max_member is None


def test_a_gpu_less_pod_with_only_a_bad_maximum_is_still_checked() -> None:
    """The webhook checks any pod carrying a gpuaware.io annotation, GPU or not."""
    p = pod()
    p["metadata"]["annotations"][ANNOTATION.GANG_MAX_MEMBERS] = "many"
    r = validate(_review(p))["response"]
    assert not r["allowed"] and "'many' is not an integer" in r["status"]["message"]
