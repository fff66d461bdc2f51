"""A recorded watch sequence drives the watcher: ADDED / MODIFIED / DELETED / BOOKMARK / ERROR 410."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from k8s_payloads import load

from gpuaware.k8s.translate import is_ours
from gpuaware.k8s.watch import Change, Relist, Watcher, WatchFailed, run_watch


def _pod(uid: str, rv: str, *, node: str | None = None) -> dict[str, Any]:
    p = copy.deepcopy(load("extender/object-pod-pending.json"))
    p["metadata"].update(uid=uid, name=f"p-{uid}", resourceVersion=rv)
    p["spec"]["schedulerName"] = "gpuaware"
    if node:
        p["spec"]["nodeName"] = node
    return p


def _ev(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def _kinds(changes: list[Change]) -> list[tuple[str, str]]:
    return [(c.kind, c.uid) for c in changes]


def test_watch_sequence_with_bookmark_and_410_relist() -> None:
    w = Watcher(keep=is_ours)
    assert w.needs_list
    assert _kinds(w.on_list([_pod("a", "10"), _pod("b", "11")], "11", now=0.0)) == [("added", "a"), ("added", "b")]
    assert w.resource_version == "11"
    assert _kinds(w.on_event(_ev("ADDED", _pod("c", "12")))) == [("added", "c")]
    assert _kinds(w.on_event(_ev("MODIFIED", _pod("a", "13")))) == [("modified", "a")]
    # bound elsewhere (spec.nodeName set): no longer ours -> deleted from our view
    assert _kinds(w.on_event(_ev("MODIFIED", _pod("b", "14", node="n1")))) == [("deleted", "b")]
    assert w.on_event(_ev("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "20"}})) == []
    assert (w.resource_version, w.bookmarks) == ("20", 1)
    assert _kinds(w.on_event(_ev("DELETED", _pod("c", "21")))) == [("deleted", "c")]
    assert w.on_event(_ev("DELETED", _pod("zz", "22"))) == []  # never seen: nothing to say
    with pytest.raises(Relist):
        w.on_event(_ev("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                                 "message": "too old resource version: 22 (30)"}))
    assert w.needs_list
    # relist: a vanished while we were away (deleted), d is new, a unchanged (same rv: nothing)
    out = w.on_list([_pod("a", "13"), _pod("d", "31")], "31", now=5.0)
    assert _kinds(out) == [("added", "d")]
    assert set(w.objects) == {"a", "d"} and w.relists == 1
    out = w.on_list([_pod("d", "31")], "32", now=6.0)
    assert _kinds(out) == [("deleted", "a")]
    with pytest.raises(WatchFailed, match="500"):
        w.on_event(_ev("ERROR", {"code": 500, "message": "etcd leader changed"}))
    assert w.resource_version == "32"  # another error keeps our place
    with pytest.raises(ValueError, match="unknown watch event"):
        w.on_event(_ev("WHATEVER", _pod("e", "33")))


def test_run_watch_relists_after_410_and_resyncs() -> None:
    w = Watcher(keep=is_ours, resync_s=100.0)
    lists = iter([([_pod("a", "1")], "1"), ([_pod("b", "5")], "5")])
    streams = iter([
        [_ev("ADDED", _pod("c", "2")), _ev("ERROR", {"code": 410, "message": "gone"})],
        [_ev("BOOKMARK", {"metadata": {"resourceVersion": "6"}})],
    ])
    watched_from: list[str] = []
    seen: list[tuple[str, str]] = []
    calls = {"n": 0}

    def watch_fn(rv: str) -> Iterator[Mapping[str, Any]]:
        watched_from.append(rv)
        yield from next(streams)

    def stop() -> bool:
        calls["n"] += 1
        return len(watched_from) >= 2 and w.resource_version == "6"

    run_watch(w, lambda: next(lists), watch_fn, lambda c: seen.append((c.kind, c.uid)), stop, clock=lambda: 0.0)
    assert watched_from == ["1", "5"]  # the second watch starts from the relist's version
    assert seen == [("added", "a"), ("added", "c"), ("added", "b"), ("deleted", "a"), ("deleted", "c")]


def test_run_watch_survives_a_connection_failure() -> None:
    w = Watcher(keep=is_ours)
    calls = {"list": 0}
    backoffs: list[int] = []

    def list_fn() -> tuple[list[Mapping[str, Any]], str]:
        calls["list"] += 1
        if calls["list"] == 1:
            raise ConnectionError("apiserver unreachable")
        return [_pod("a", "1")], "1"

    def watch_fn(rv: str) -> Iterator[Mapping[str, Any]]:
        yield from ()

    seen: list[str] = []
    run_watch(w, list_fn, watch_fn, lambda c: seen.append(c.uid), lambda: bool(seen), clock=lambda: 0.0,
              backoff=backoffs.append)
    assert backoffs == [1] and seen == ["a"]
