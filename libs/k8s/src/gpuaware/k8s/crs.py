"""Our custom resources as the services' own inputs: GPUQueues -> the quota tree, GPUPolicy -> a profile.

Why: the CRDs carry exactly the Structs the services decode (``crds.py``), so turning the objects a
cluster holds into the quota service's configuration and placement's profile is a decode plus the
services' own validators, with nothing re-implemented: ``gpuaware.quota.tree.validate`` (cycles,
over-commitment, unknown parents) for the queues, ``REGISTRY.validate`` for a policy. A refused set of
objects names each object and the reason, so whoever writes them (an operator, a GitOps tool) sees
which one is wrong.

Watched (``cr_watch.py`` feeds ``QueueSet`` / ``PolicySet`` with a list+watch), the rules are:

- an object that does not validate changes nothing: the configuration in force stays (including the
  object's previous generation, when one was accepted) and the object is told why in its status
  (``Accepted=False`` with every reason; ``Accepted=True`` once accepted, both with the generation
  judged: ``observedGeneration``);
- queues form one tree, so a queue is accepted when the tree *with it* validates against the queues
  already in force. Objects arriving in any order (a child before its parent, as ``kubectl apply -f
  dir/`` does) settle: the set is tried whole first, then queue by queue until nothing more fits;
- deleting an object removes its queue (its descendants, now orphans, leave the tree too and are
  told so) or its policy;
- statuses are written only when they would change, so the write's own MODIFIED event settles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from gpuaware.k8s.watch import Change

__all__ = [
    "ACCEPTED",
    "CustomResourceError",
    "PolicySet",
    "QueueSet",
    "Verdict",
    "accepted_patch",
    "policy_profile",
    "quota_config",
]

ACCEPTED = "Accepted"
"""the condition type a service writes on the objects it reads"""
MAX_MESSAGE = 32_768
"""metav1.Condition's longest message"""


class CustomResourceError(ValueError):
    """Objects that do not make a valid configuration; the message names them."""


def quota_config(queues: Iterable[Mapping[str, Any]], *, default_queue: str | None = None,
                 half_life_s: float | None = None, tree_fields: Mapping[str, Any] | None = None) -> Any:
    """The quota service's ``QuotaConfig`` from GPUQueue objects (API JSON), validated as a tree.
    Each object's ``spec.name`` must be its ``metadata.name`` (one queue per object). ``tree_fields``
    are the tree's cluster-wide fields no GPUQueue carries (``QuotaConfig``'s, such as
    ``max_preemptions_per_pod``), as the quota service's settings give them."""
    from gpuaware.quota import QuotaConfigError, validate

    specs = []
    problems = []
    for obj in queues:
        try:
            specs.append(_queue_spec(obj))
        except CustomResourceError as exc:
            problems.append(str(exc))
    if problems:
        raise CustomResourceError("; ".join(problems))
    config = _config(specs, default_queue, half_life_s, tree_fields)
    try:
        validate(config)
    except QuotaConfigError as exc:
        raise CustomResourceError(f"GPUQueues: {exc}") from None
    return config


def _queue_spec(obj: Any) -> Any:
    """One GPUQueue's ``QueueSpec``; ``CustomResourceError`` naming the object otherwise."""
    from gpuaware.quota import QueueSpec

    name = _name(obj)
    if not isinstance(obj, Mapping):
        raise CustomResourceError(f"GPUQueue {name}: not an object")
    try:
        spec = msgspec.convert(obj.get("spec"), QueueSpec)
    except msgspec.ValidationError as exc:
        raise CustomResourceError(f"GPUQueue {name}: {exc}") from None
    if spec.name != name:
        raise CustomResourceError(f"GPUQueue {name}: spec.name {spec.name!r} differs from metadata.name")
    return spec


def _config(specs: Iterable[Any], default_queue: str | None, half_life_s: float | None,
            tree_fields: Mapping[str, Any] | None = None) -> Any:
    from gpuaware.quota import QuotaConfig

    kw: dict[str, Any] = {**(tree_fields or {}), "queues": tuple(sorted(specs, key=lambda q: q.name)),
                          "default_queue": default_queue}
    if half_life_s is not None:
        kw["half_life_s"] = half_life_s
    return QuotaConfig(**kw)


def _name(obj: Any) -> Any:
    """``metadata.name`` of an object of any shape (None when it has none), for messages."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta.get("name") if isinstance(meta, Mapping) else None


def _uid(obj: Mapping[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("uid")


def _generation(obj: Mapping[str, Any]) -> int:
    g = (obj.get("metadata") or {}).get("generation")
    return g if isinstance(g, int) else 0


def policy_profile(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A GPUPolicy's spec as a placement profile (checked by the registry: every plugin known, every
    argument typed), ready for ``GPUAWARE_PLACEMENT_PROFILE``."""
    from gpuaware.placement import REGISTRY

    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, dict):
        raise CustomResourceError(f"GPUPolicy {_name(obj)}: no spec")
    try:
        REGISTRY.validate(spec)
    except ValueError as exc:
        raise CustomResourceError(f"GPUPolicy {_name(obj)}: {exc}") from None
    return dict(spec)


# -- what a service made of each object, written back as its status ------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """One object's generation, accepted or refused with the reasons (``message``)."""

    generation: int
    accepted: bool
    message: str


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def accepted_patch(obj: Mapping[str, Any], verdict: Verdict, now: str | None = None) -> dict[str, Any] | None:
    """The merge patch of ``obj``'s status that says ``verdict`` (its ``Accepted`` condition replaced,
    other conditions kept, ``lastTransitionTime`` moved only when the status flips); None when the
    status says it already."""
    raw = obj.get("status")
    status: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    conditions = [c for c in status.get("conditions") or () if isinstance(c, Mapping)]
    old = next((c for c in conditions if c.get("type") == ACCEPTED), None)
    want = {"type": ACCEPTED, "status": "True" if verdict.accepted else "False",
            "reason": "Valid" if verdict.accepted else "Invalid", "message": verdict.message[:MAX_MESSAGE],
            "observedGeneration": verdict.generation}
    if (old is not None and all(old.get(k) == v for k, v in want.items())
            and status.get("observedGeneration") == verdict.generation):
        return None
    kept = old.get("lastTransitionTime") if old is not None and old.get("status") == want["status"] else None
    want["lastTransitionTime"] = kept or now or _now()
    others = [dict(c) for c in conditions if c.get("type") != ACCEPTED]
    return {"status": {"observedGeneration": verdict.generation, "conditions": [*others, want]}}


class _ObjectSet:
    """Objects of one kind by name, what was made of each (``verdicts``), and the status patches that
    say it. Subclasses decide what is in force (``reconcile``)."""

    kind = ""

    def __init__(self) -> None:
        self.objects: dict[str, Mapping[str, Any]] = {}
        self.verdicts: dict[str, Verdict] = {}
        self._written: dict[str, tuple[str | None, dict[str, Any]]] = {}

    def record(self, change: Change) -> None:
        """One watch change, kept until the next ``reconcile`` (a LIST's changes are judged together)."""
        name = _name(change.obj)
        if not isinstance(name, str):
            return
        if change.kind == "deleted":
            held = self.objects.get(name)
            if held is not None and _uid(held) != _uid(change.obj):
                return  # an older object of that name (a relist reports it gone after its successor)
            self.objects.pop(name, None)
            self.verdicts.pop(name, None)
            self._written.pop(name, None)
        else:
            self.objects[name] = change.obj

    def reconcile(self) -> bool:
        """Judge every object; True when the configuration in force changed."""
        raise NotImplementedError

    def status_patches(self, now: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """(name, merge patch) for each object whose status does not say its verdict yet."""
        out = []
        for name, verdict in sorted(self.verdicts.items()):
            obj = self.objects.get(name)
            if obj is None:
                continue
            patch = accepted_patch(obj, verdict, now)
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if patch is None or self._same_as_written(name, rv, patch):
                continue
            self._written[name] = (rv, patch)
            out.append((name, patch))
        return out

    def forget_written(self, name: str) -> None:
        """The last patch for ``name`` did not go through: the next ``status_patches`` offers it again."""
        self._written.pop(name, None)

    def _same_as_written(self, name: str, rv: str | None, patch: dict[str, Any]) -> bool:
        """Already sent for this version of the object (its MODIFIED event has not come back yet)."""
        seen = self._written.get(name)
        if seen is None or seen[0] != rv:
            return False
        strip = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in patch["status"]["conditions"]]
        sent = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in seen[1]["status"]["conditions"]]
        return strip == sent


class QueueSet(_ObjectSet):
    """The GPUQueue objects and the quota tree in force made of them (see the module docstring).
    ``tree`` is None while no queue is in force (the service's own default applies)."""

    kind = "GPUQueue"

    def __init__(self, *, default_queue: str | None = None, half_life_s: float | None = None,
                 tree_fields: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.default_queue = default_queue
        self.half_life_s = half_life_s
        self.tree_fields = dict(tree_fields or {})
        """the tree's cluster-wide fields (``quota_config``'s ``tree_fields``)"""
        self.in_force: dict[str, tuple[int, Any]] = {}
        """name -> (generation, QueueSpec) the tree is made of"""
        self.tree: Any = None

    def _tree(self, entries: Mapping[str, tuple[int, Any]]) -> Any:
        """The validated tree of these queues (None when there are none); QuotaConfigError otherwise."""
        from gpuaware.quota import validate

        if not entries:
            return None
        return validate(_config((spec for _, spec in entries.values()), self.default_queue, self.half_life_s,
                                self.tree_fields))

    def _grow(self, start: dict[str, tuple[int, Any]], candidates: dict[str, tuple[int, Any]]
              ) -> tuple[dict[str, tuple[int, Any]], dict[str, str]]:
        """``start`` (valid) with as many of ``candidates`` as fit: all at once when the whole set
        validates, else one by one (by name) until a pass adds none. Returns (the set, name -> why
        each candidate left out does not fit)."""
        from gpuaware.quota import QuotaConfigError

        if not candidates:
            return start, {}
        try:
            self._tree({**start, **candidates})
            return {**start, **candidates}, {}
        except QuotaConfigError:
            pass
        accepted, left, reasons = dict(start), dict(candidates), {}
        progress = True
        while left and progress:
            progress = False
            for name in sorted(left):
                trial = {**accepted, name: left[name]}
                try:
                    self._tree(trial)
                except QuotaConfigError as exc:
                    reasons[name] = str(exc)
                    continue
                accepted = trial
                del left[name]
                progress = True
        return accepted, {name: reasons[name] for name in left}

    def reconcile(self) -> bool:
        current: dict[str, tuple[int, Any]] = {}
        refused: dict[str, str] = {}
        for name, obj in self.objects.items():
            try:
                current[name] = (_generation(obj), _queue_spec(obj))
            except CustomResourceError as exc:
                refused[name] = str(exc).removeprefix(f"GPUQueue {name}: ")
        # what was in force and still exists, then every object's new generation, each only where it fits
        kept, orphaned = self._grow({}, {n: e for n, e in self.in_force.items() if n in self.objects})
        changed = {n: e for n, e in current.items() if kept.get(n) != e}
        final, misfits = self._grow(kept, changed)
        verdicts: dict[str, Verdict] = {}
        for name, obj in self.objects.items():
            generation = _generation(obj)
            held = final.get(name)
            if name in current and held == current[name]:
                verdicts[name] = Verdict(generation, True, "in the quota tree")
                continue
            why = refused.get(name) or misfits.get(name) or orphaned.get(name) or "not in the quota tree"
            stays = f" (generation {held[0]} stays in force)" if held is not None else ""
            verdicts[name] = Verdict(generation, False, why + stays)
        self.verdicts = verdicts  # whole: the service's metrics read it from another thread
        if final == self.in_force:
            return False
        self.in_force = final
        self.tree = self._tree(final)
        return True


class PolicySet(_ObjectSet):
    """The GPUPolicy objects; the one named ``follow`` is placement's profile (``profile``; None while
    no valid generation of it exists: the service's own policy applies). Each object is judged alone."""

    kind = "GPUPolicy"

    def __init__(self, follow: str) -> None:
        super().__init__()
        self.follow = follow
        self.in_force: dict[str, tuple[int, dict[str, Any]]] = {}
        self.profile: dict[str, Any] | None = None

    def reconcile(self) -> bool:
        self.in_force = {n: e for n, e in self.in_force.items() if n in self.objects}
        verdicts: dict[str, Verdict] = {}
        for name, obj in self.objects.items():
            generation = _generation(obj)
            try:
                profile = policy_profile(obj)
            except CustomResourceError as exc:
                held = self.in_force.get(name)
                stays = f" (generation {held[0]} stays in force)" if held is not None and name == self.follow else ""
                verdicts[name] = Verdict(generation, False, str(exc).removeprefix(f"GPUPolicy {name}: ") + stays)
                continue
            self.in_force[name] = (generation, profile)
            verdicts[name] = Verdict(generation, True, "placement's profile" if name == self.follow else
                                     f"valid; placement follows the GPUPolicy named {self.follow!r}")
        self.verdicts = verdicts
        followed = self.in_force.get(self.follow)
        in_force = None if followed is None else followed[1]
        if in_force == self.profile:
            return False
        self.profile = in_force
        return True
