"""GPUQueue / GPUPolicy watches, driven by recorded sequences (tests/k8s/payloads/*-watch.json: the LIST
the apiserver answers, the watch stream's ADDED / MODIFIED / DELETED / BOOKMARK / ERROR 410 lines, the
relist after it): what is in force after each step, and the status each object is told."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpuaware.k8s import ConfigWatch, PolicySet, QueueSet
from gpuaware.k8s.crs import Verdict, accepted_patch
from gpuaware.k8s.watch import Relist, Watcher

PAYLOADS = Path(__file__).parent / "payloads"
CRDS = Path(__file__).resolve().parents[2] / "helm" / "gpuaware" / "crds"


def recorded(name: str) -> dict[str, Any]:
    return json.loads((PAYLOADS / f"{name}-watch.json").read_text())


def gpus(tree: Any, queue: str) -> int | None:
    g = tree.specs[queue].guaranteed.get("*")
    return None if g is None else g.gpus


def verdicts(s: QueueSet | PolicySet) -> dict[str, tuple[int, bool]]:
    return {n: (v.generation, v.accepted) for n, v in s.verdicts.items()}


def step(w: Watcher, s: QueueSet | PolicySet, event: Mapping[str, Any]) -> bool:
    for ch in w.on_event(event):
        s.record(ch)
    return s.reconcile()


def _draft4(s: Any) -> Any:
    """The CRD's OpenAPI v3.0 schema as draft-4 JSON Schema (``nullable`` -> a null type)."""
    if isinstance(s, list):
        return [_draft4(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: _draft4(v) for k, v in s.items() if not k.startswith("x-kubernetes") and k != "nullable"}
    if s.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@pytest.mark.parametrize("plural", ["gpuqueues", "gpupolicies"])
def test_recorded_objects_and_the_statuses_written_are_what_the_crd_accepts(plural: str) -> None:
    crd = yaml.safe_load((CRDS / f"{plural}.gpuaware.io.yaml").read_text())
    validator = jsonschema.Draft4Validator(_draft4(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]))
    rec = recorded(plural)
    objects = [*rec["list"]["items"], *rec["relist"]["items"],
               *(e["object"] for e in rec["events"] if e["type"] in ("ADDED", "MODIFIED", "DELETED"))]
    s: QueueSet | PolicySet = QueueSet() if plural == "gpuqueues" else PolicySet(follow="default")
    w = Watcher()
    for ch in w.on_list(rec["list"]["items"], "1", now=0.0):
        s.record(ch)
    s.reconcile()
    for name, patch in s.status_patches(now="2026-03-14T09:06:00Z"):
        objects.append({**s.objects[name], **patch})  # the object as the merge patch leaves it
    for obj in objects:
        assert obj["kind"] == crd["spec"]["names"]["kind"]
        assert sorted(e.message for e in validator.iter_errors(obj)) == [], obj["metadata"]["name"]


def test_queue_sequence_changes_the_tree_and_refusals_change_nothing() -> None:
    rec = recorded("gpuqueues")
    w, s = Watcher(), QueueSet()
    ev = iter(rec["events"])
    for ch in w.on_list(rec["list"]["items"], rec["list"]["metadata"]["resourceVersion"], now=0.0):
        s.record(ch)
    assert s.reconcile() and sorted(s.tree.specs) == ["org", "team-a"]
    # ADDED team-b (4 of org's 16)
    assert step(w, s, next(ev)) and gpus(s.tree, "team-b") == 4
    # MODIFIED team-a generation 2: 12 + 4 <= 16
    assert step(w, s, next(ev)) and gpus(s.tree, "team-a") == 12 and s.tree.specs["team-a"].weight == 2.0
    # MODIFIED team-b generation 2 asks 8: 12 + 8 > 16, refused; generation 1 (4 GPUs) stays
    assert not step(w, s, next(ev)) and gpus(s.tree, "team-b") == 4
    refusal = s.verdicts["team-b"]
    assert (refusal.generation, refusal.accepted) == (2, False)
    assert "org" in refusal.message and "generation 1 stays in force" in refusal.message
    patches = dict(s.status_patches(now="2026-03-14T09:06:00Z"))
    assert set(patches) == {"org", "team-a", "team-b"}  # each told once
    cond = patches["team-b"]["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == ("Accepted", "False", "Invalid", 2)
    assert patches["team-b"]["status"]["observedGeneration"] == 2
    assert s.status_patches() == []  # written: not again before the object changes
    # our own status write comes back as MODIFIED (same generation): nothing changes
    assert not step(w, s, next(ev)) and gpus(s.tree, "team-b") == 4
    # a child before its parent: refused (unknown parent), then accepted once the parent arrives
    assert not step(w, s, next(ev)) and "team-c" not in s.tree.specs
    assert "unknown parent 'research'" in s.verdicts["team-c"].message and not s.verdicts["team-c"].accepted
    assert step(w, s, next(ev)) and s.tree.parent["team-c"] == "research"
    assert verdicts(s)["team-c"] == (1, True) and verdicts(s)["research"] == (1, True)
    # DELETED team-a: its queue leaves the tree, and team-b's waiting generation 2 now fits
    assert step(w, s, next(ev)) and "team-a" not in s.tree.specs and gpus(s.tree, "team-b") == 8
    assert verdicts(s)["team-b"] == (2, True) and "team-a" not in s.verdicts
    assert not step(w, s, next(ev))  # BOOKMARK
    with pytest.raises(Relist):
        step(w, s, next(ev))  # ERROR 410
    # relist: team-c went while we were away (a deletion), team-d is new
    for ch in w.on_list(rec["relist"]["items"], rec["relist"]["metadata"]["resourceVersion"], now=1.0):
        s.record(ch)
    assert s.reconcile() and sorted(s.tree.specs) == ["org", "research", "team-b", "team-d"]


def test_deleting_a_parent_takes_its_children_out_and_tells_them() -> None:
    rec = recorded("gpuqueues")
    s = QueueSet()
    w = Watcher()
    for ch in w.on_list(rec["list"]["items"], "1", now=0.0):
        s.record(ch)
    s.reconcile()
    org = rec["list"]["items"][0]
    step(w, s, {"type": "DELETED", "object": org})
    assert s.tree is None  # no queue in force: the service's own default applies
    assert verdicts(s) == {"team-a": (1, False)} and "unknown parent 'org'" in s.verdicts["team-a"].message


def test_a_queue_deleted_and_created_again_while_away_stays() -> None:
    """A relist reports the new object (another uid, same name) before the old one's deletion."""
    rec = recorded("gpuqueues")
    s, w = QueueSet(), Watcher()
    for ch in w.on_list(rec["list"]["items"], "1", now=0.0):
        s.record(ch)
    s.reconcile()
    again = json.loads(json.dumps(rec["list"]["items"][1]))
    again["metadata"].update(uid="another-uid", resourceVersion="7", generation=1)
    again["spec"]["guaranteed"] = {"*": {"gpus": 2}}
    for ch in w.on_list([rec["list"]["items"][0], again], "8", now=1.0):
        s.record(ch)
    assert s.reconcile() and gpus(s.tree, "team-a") == 2 and verdicts(s)["team-a"] == (1, True)


def test_a_malformed_queue_is_refused_with_every_reason() -> None:
    s = QueueSet()
    w = Watcher()
    bad = {"apiVersion": "gpuaware.io/v1alpha1", "kind": "GPUQueue",
           "metadata": {"name": "x", "uid": "u-x", "resourceVersion": "5", "generation": 1},
           "spec": {"name": "y", "weight": 1.0}}
    step(w, s, {"type": "ADDED", "object": bad})
    assert s.tree is None and verdicts(s) == {"x": (1, False)}
    assert "differs from metadata.name" in s.verdicts["x"].message


def test_policy_sequence_follows_one_object_and_keeps_the_last_good_generation() -> None:
    rec = recorded("gpupolicies")
    w, s = Watcher(), PolicySet(follow="default")
    ev = iter(rec["events"])
    for ch in w.on_list(rec["list"]["items"], rec["list"]["metadata"]["resourceVersion"], now=0.0):
        s.record(ch)
    assert not s.reconcile() and s.profile is None  # only "packing": valid, not followed
    assert s.verdicts["packing"].accepted and "follows the GPUPolicy named 'default'" in s.verdicts["packing"].message
    assert step(w, s, next(ev)) and s.profile is not None and s.profile["gpu"] == "fgd"
    # generation 2 names a plugin nobody registered: refused, generation 1 stays
    assert not step(w, s, next(ev)) and s.profile["gpu"] == "fgd"
    assert verdicts(s)["default"] == (2, False) and "no-such-plugin" in s.verdicts["default"].message
    assert "generation 1 stays in force" in s.verdicts["default"].message
    assert step(w, s, next(ev)) and s.profile["gpu"] == "best" and verdicts(s)["default"] == (3, True)
    with pytest.raises(Relist):
        step(w, s, next(ev))
    for ch in w.on_list(rec["relist"]["items"], rec["relist"]["metadata"]["resourceVersion"], now=1.0):
        s.record(ch)
    assert s.reconcile() and s.profile is None  # deleted while we were away: back to the service's own


def test_condition_keeps_its_transition_time_until_the_status_flips() -> None:
    obj = {"metadata": {"name": "a", "generation": 3}, "status": {"observedGeneration": 2, "conditions": [
        {"type": "Ready", "status": "True"},
        {"type": "Accepted", "status": "True", "reason": "Valid", "message": "m", "observedGeneration": 2,
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    patch = accepted_patch(obj, Verdict(3, True, "m"), now="2026-02-02T00:00:00Z")
    assert patch is not None
    ready, accepted = patch["status"]["conditions"]
    assert ready == {"type": "Ready", "status": "True"}  # another writer's condition is kept
    assert accepted["lastTransitionTime"] == "2026-01-01T00:00:00Z" and accepted["observedGeneration"] == 3
    flipped = accepted_patch(obj, Verdict(3, False, "bad"), now="2026-02-02T00:00:00Z")
    assert flipped is not None and flipped["status"]["conditions"][1]["lastTransitionTime"] == "2026-02-02T00:00:00Z"
    obj["status"] = patch["status"]
    assert accepted_patch(obj, Verdict(3, True, "m")) is None


async def test_config_watch_hands_the_tree_to_the_loop_and_writes_statuses() -> None:
    """The shell over a recorded sequence: the first watch fails (the apiserver away: backoff, same
    version), the next streams the events up to the 410, the relist, then nothing more."""
    rec = recorded("gpuqueues")
    lists = iter([(rec["list"]["items"], rec["list"]["metadata"]["resourceVersion"]),
                  (rec["relist"]["items"], rec["relist"]["metadata"]["resourceVersion"])])
    watched_from: list[str] = []
    streams = iter([None, rec["events"], []])

    def watch_fn(rv: str) -> Iterator[Mapping[str, Any]]:
        watched_from.append(rv)
        events = next(streams, [])
        if events is None:
            raise ConnectionError("apiserver unreachable")
        yield from events

    trees: list[Any] = []
    written: list[tuple[str, int, str]] = []
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    def on_config(tree: Any) -> None:
        trees.append(tree)

    def write_status(name: str, patch: Mapping[str, Any]) -> None:  # in the watch's thread
        cond = patch["status"]["conditions"][-1]
        written.append((name, cond["observedGeneration"], cond["status"]))
        if name == "team-d":
            loop.call_soon_threadsafe(done.set)

    watch = ConfigWatch(QueueSet(), (lambda: next(lists), watch_fn), write_status, on_config,
                        backoff=lambda n: 0.0)
    watch.start()
    await asyncio.wait_for(watch.synced.wait(), 10)
    assert sorted(trees[0].specs) == ["org", "team-a"]  # handed over before `synced`
    await asyncio.wait_for(done.wait(), 10)
    await watch.stop()
    assert watched_from[0] == watched_from[1] == "48213000"  # after the failure: the same version
    assert ("team-b", 2, "False") in written and ("team-b", 2, "True") in written
    assert ("team-d", 1, "True") in written and "team-d" in trees[-1].specs  # the tree first, then the statuses
