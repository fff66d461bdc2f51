"""Our CustomResourceDefinitions, generated from the Structs that already define their specs.

Why generated: a CRD's OpenAPI schema is a second copy of a type; written by hand it drifts. Here the
``spec`` of each kind is the JSON Schema msgspec derives from the Struct its consumer decodes with,
turned into a Kubernetes *structural* schema, so the apiserver refuses exactly what the service would:

- ``GPUQueue`` (``gpuaware.io/v1alpha1``): ``spec`` = ``gpuaware.quota.tree.QueueSpec`` (the quota
  service's file format, one queue per object); ``status`` = ``ConfigStatus``.
- ``GPUPolicy``: ``spec`` = ``gpuaware.placement.args.Profile`` (placement profile and weights);
  ``status`` = ``ConfigStatus``.

``ConfigStatus`` is what the service that reads the object writes back (``crs.py``): an ``Accepted``
condition (``True``, or ``False`` with every reason it was refused) and the ``metadata.generation``
it judged, in the shape of ``metav1.Condition`` so ``kubectl wait --for=condition=Accepted`` works.
- ``GPUGang``: a gang workload (``GangSpec`` below), the PodGroup of scheduler-plugins' coscheduling
  under our group; pods join one with the ``gpuaware.io/gang`` annotation, or keep their
  ``scheduling.x-k8s.io/pod-group`` label (read as the gang's name: PodGroup compatibility). An
  elastic gang (torchrun-style training) gives ``maxMember`` as well: ``minMember`` workers start
  all-or-none, the rest up to ``maxMember`` run while GPUs are idle and are the first taken back.

Each has a ``status`` subresource (the controller writes status, users write spec) and printer
columns. The structural rewrite: ``$ref`` inlined, ``anyOf [X, null]`` -> ``X`` + ``nullable``,
``exclusiveMinimum: n`` -> ``minimum: n`` + ``exclusiveMinimum: true`` (OpenAPI v3.0), titles and
null defaults dropped, ``additionalProperties: false`` dropped (the apiserver prunes unknown fields),
free-form objects marked ``x-kubernetes-preserve-unknown-fields``.

``python -m gpuaware.k8s.crds DIR`` writes one YAML file per CRD (the chart's ``crds/``); a test
checks the chart's files are what this module generates now.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import msgspec
import yaml
from msgspec import Meta

__all__ = ["GROUP", "VERSION", "Condition", "ConfigStatus", "GangSpec", "GangStatus", "all_crds", "crd", "structural"]

GROUP = "gpuaware.io"
VERSION = "v1alpha1"


class GangSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """A gang: its pods are placed all together or not at all."""

    min_member: Annotated[int, Meta(ge=1)]
    """pods that must be placed together (scheduler-plugins' PodGroup ``minMember``)"""
    max_member: Annotated[int, Meta(ge=1, le=4096)] | None = None
    """an elastic gang's most pods (torchrun's ``--nnodes=MIN:MAX``; at most what the contract carries,
    ``PodPending.gang_max_members``); absent: fixed at ``minMember``"""
    queue: str = "default"
    topology: str = "none"
    """none | same-nvlink-island | same-numa | same-rack"""
    schedule_timeout_seconds: Annotated[int, Meta(ge=1)] | None = None
    priority_class_name: str | None = None

    def __post_init__(self) -> None:
        if self.max_member is not None and self.max_member < self.min_member:
            raise ValueError(f"maxMember {self.max_member} is below minMember {self.min_member}")


class GangStatus(msgspec.Struct, kw_only=True, rename="camel"):
    phase: str = "Pending"
    """Pending | Scheduled | Running | Failed"""
    scheduled: int = 0
    running: int = 0
    message: str = ""


class Condition(msgspec.Struct, kw_only=True, rename="camel"):
    """A condition, with metav1.Condition's fields."""

    type: str
    status: str
    """True | False | Unknown"""
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int = 0


class ConfigStatus(msgspec.Struct, kw_only=True, rename="camel"):
    """The status of an object a service takes as configuration (GPUQueue, GPUPolicy)."""

    observed_generation: int = 0
    """the ``metadata.generation`` the conditions speak of"""
    conditions: list[Condition] = msgspec.field(default_factory=list)


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A msgspec JSON Schema as a Kubernetes structural schema (see the module docstring)."""
    defs = schema.get("$defs", {}) if defs is None else defs
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        merged = {**defs[name], **{k: v for k, v in schema.items() if k not in ("$ref", "$defs")}}
        return structural(merged, defs)
    out: dict[str, Any] = {}
    any_of = schema.get("anyOf")
    if any_of is not None:
        non_null = [s for s in any_of if s.get("type") != "null"]
        if len(non_null) != 1:
            return {"x-kubernetes-preserve-unknown-fields": True,
                    **({"description": schema["description"]} if "description" in schema else {})}
        out = structural(non_null[0], defs)
        if len(non_null) < len(any_of):
            out["nullable"] = True
        for k in ("description",):
            if k in schema:
                out[k] = schema[k]
        return out
    for k, v in schema.items():
        if k in ("title", "$defs", "additionalProperties", "properties", "items", "required"):
            continue
        if k == "default" and (v is None or (v == {} and "properties" in schema)):
            continue
        if k == "exclusiveMinimum":
            out["minimum"] = v
            out["exclusiveMinimum"] = True
            continue
        if k == "exclusiveMaximum":
            out["maximum"] = v
            out["exclusiveMaximum"] = True
            continue
        out[k] = v
    if "properties" in schema:
        out["properties"] = {k: structural(v, defs) for k, v in schema["properties"].items()}
        if schema.get("required"):
            out["required"] = list(schema["required"])
    elif isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = structural(schema["additionalProperties"], defs)
    elif schema.get("type") == "object":
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in schema:
        out["items"] = structural(schema["items"], defs)
    return out


def _schema_of(t: Any) -> dict[str, Any]:
    return structural(msgspec.json.schema(t))


def crd(kind: str, plural: str, spec: dict[str, Any], status: dict[str, Any], *, short: list[str],
        columns: list[dict[str, Any]], description: str, scope: str = "Namespaced") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "gpuaware"}},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"kind": kind, "listKind": kind + "List", "plural": plural, "singular": kind.lower(),
                      "shortNames": short, "categories": ["gpuaware"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [*columns, {"name": "Age", "type": "date",
                                                        "jsonPath": ".metadata.creationTimestamp"}],
                "schema": {"openAPIV3Schema": {
                    "type": "object", "description": description,
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                        "spec": spec, "status": status,
                    }}},
            }],
        },
    }


ACCEPTED_COLUMN = {"name": "Accepted", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Accepted")].status'}


def all_crds() -> list[dict[str, Any]]:
    from gpuaware.placement import Profile
    from gpuaware.quota import QueueSpec

    return [
        crd("GPUQueue", "gpuqueues", _schema_of(QueueSpec), _schema_of(ConfigStatus), short=["gq"],
            scope="Cluster",
            description="A tenant queue of the quota tree (the quota service's QueueSpec): guarantees, limits, "
                        "weight, priority, time windows, a lease before its pods may be reclaimed.",
            columns=[{"name": "Parent", "type": "string", "jsonPath": ".spec.parent"},
                     {"name": "Weight", "type": "number", "jsonPath": ".spec.weight"},
                     {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"}, ACCEPTED_COLUMN]),
        crd("GPUPolicy", "gpupolicies", _schema_of(Profile), _schema_of(ConfigStatus), short=["gpol"],
            scope="Cluster",
            description="A placement profile: filter, score plugins with weights, GPU selection, preemption.",
            columns=[{"name": "GPU", "type": "string", "jsonPath": ".spec.gpu"}, ACCEPTED_COLUMN]),
        crd("GPUGang", "gpugangs", _schema_of(GangSpec), _schema_of(GangStatus), short=["gang"],
            description="A gang of pods placed all together or not at all (PodGroup-compatible); an "
                        "elastic one runs minMember to maxMember pods.",
            columns=[{"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"},
                     {"name": "MaxMember", "type": "integer", "jsonPath": ".spec.maxMember"},
                     {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]),
    ]


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for c in all_crds():
        p = directory / f"{c['metadata']['name']}.yaml"
        p.write_text("# generated by `python -m gpuaware.k8s.crds` from the Structs named in its docstring\n"
                     + yaml.safe_dump(c, sort_keys=False, width=120))
        out.append(p)
    return out


if __name__ == "__main__":
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else "helm/gpuaware/crds")):
        print(p)
