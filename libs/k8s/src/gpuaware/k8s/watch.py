"""List + watch as a pure state machine, and the thin loop that feeds it from the API.

Why pure: the hard part of a Kubernetes watch is not the HTTP stream but its rules, and those can be
tested from a recorded sequence with no cluster:

- start with a LIST; its ``metadata.resourceVersion`` is where the WATCH starts;
- ADDED / MODIFIED / DELETED carry the object; each one's ``resourceVersion`` becomes ours
  (a MODIFIED for an object we never saw is an add; a DELETED for one we never saw changes nothing);
- BOOKMARK carries only a newer ``resourceVersion`` (sent when ``allowWatchBookmarks=true``);
- ERROR with code 410 (Gone: our version was compacted away) means relist; the relist is diffed
  against what we knew, so objects that vanished meanwhile come out as deletions and nothing is lost;
- any other ERROR (and a connection failure) makes the loop back off and re-watch from the same version;
- a periodic resync re-lists on a schedule (cheap insurance against a silently stuck watch).

``Watcher`` keeps the objects by UID and turns every input into ``Change``s; the loop in
``run_watch`` only calls the API and hands the results over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Change", "Relist", "WatchFailed", "Watcher", "run_watch"]

log = logging.getLogger(__name__)

ChangeKind = Literal["added", "modified", "deleted"]


@dataclass(frozen=True, slots=True)
class Change:
    kind: ChangeKind
    obj: Mapping[str, Any]

    @property
    def uid(self) -> str:
        return self.obj["metadata"]["uid"]


class Relist(Exception):
    """The watch cannot continue from our resourceVersion (410 Gone): list again."""


class WatchFailed(Exception):
    """An ERROR event other than 410: back off, then watch again from the same resourceVersion."""

    def __init__(self, status: Mapping[str, Any]) -> None:
        super().__init__(f"watch error {status.get('code')}: {status.get('message', '')}")
        self.status = status


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        raise ValueError(f"object {meta.get('namespace')}/{meta.get('name')} has no metadata.uid")
    return uid


def _rv(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


@dataclass(slots=True)
class Watcher:
    """The known objects of one resource and where the watch stands. ``keep(obj)`` filters what is
    tracked (e.g. pods for our scheduler); an object that stops matching comes out as deleted."""

    keep: Callable[[Mapping[str, Any]], bool] = lambda _o: True
    resync_s: float = 300.0
    objects: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    resource_version: str | None = None
    listed_at: float | None = None
    relists: int = 0
    bookmarks: int = 0

    @property
    def needs_list(self) -> bool:
        return self.resource_version is None

    def due(self, now: float) -> bool:
        """A periodic resync is due."""
        return self.listed_at is None or now - self.listed_at >= self.resync_s

    def on_list(self, items: Iterable[Mapping[str, Any]], resource_version: str, now: float) -> list[Change]:
        """A full LIST: diffed against what we knew (first list: everything is added)."""
        seen: dict[str, Mapping[str, Any]] = {}
        out: list[Change] = []
        for obj in items:
            if not self.keep(obj):
                continue
            uid = _uid(obj)
            seen[uid] = obj
            old = self.objects.get(uid)
            if old is None:
                out.append(Change("added", obj))
            elif _rv(old) != _rv(obj):
                out.append(Change("modified", obj))
        out += [Change("deleted", old) for uid, old in self.objects.items() if uid not in seen]
        if self.listed_at is not None:
            self.relists += 1
        self.objects = seen
        self.resource_version = resource_version
        self.listed_at = now
        return out

    def on_event(self, event: Mapping[str, Any]) -> list[Change]:
        """One watch event (``{"type": ..., "object": ...}`` as the API streams it). Raises ``Relist`` on
        410, ``WatchFailed`` on another ERROR, ``ValueError`` on an event it cannot read."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                self.resource_version = None  # the only way forward is a new LIST
                raise Relist(obj.get("message", "resourceVersion too old"))
            raise WatchFailed(obj)
        if kind == "BOOKMARK":
            rv = _rv(obj)
            if rv:
                self.resource_version = rv
                self.bookmarks += 1
            return []
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            raise ValueError(f"unknown watch event type {kind!r}")
        uid = _uid(obj)
        rv = _rv(obj)
        if rv:
            self.resource_version = rv
        old = self.objects.get(uid)
        if kind == "DELETED" or not self.keep(obj):
            if old is None:
                return []
            del self.objects[uid]
            return [Change("deleted", obj)]
        self.objects[uid] = obj
        return [Change("added" if old is None else "modified", obj)]


def run_watch(watcher: Watcher, list_fn: Callable[[], tuple[list[Mapping[str, Any]], str]],
              watch_fn: Callable[[str], Iterator[Mapping[str, Any]]], handle: Callable[[Change], None],
              stop: Callable[[], bool], clock: Callable[[], float],
              backoff: Callable[[int], None] = lambda _n: None,
              settled: Callable[[], None] = lambda: None) -> None:
    """The I/O shell: LIST when needed (start, 410, resync due), else WATCH from our version and feed
    each event to the watcher. ``list_fn`` returns (items as JSON, resourceVersion); ``watch_fn(rv)``
    yields events as JSON until the server closes the stream. ``backoff(n)`` sleeps after the n-th
    consecutive failure (the caller's retry policy). ``settled()`` is called after a LIST's changes
    and after each event's, so a caller that judges objects together sees a LIST whole."""
    failures = 0
    while not stop():
        try:
            if watcher.needs_list or watcher.due(clock()):
                items, rv = list_fn()
                for ch in watcher.on_list(items, rv, clock()):
                    handle(ch)
                settled()
            assert watcher.resource_version is not None
            for ev in watch_fn(watcher.resource_version):
                changes = watcher.on_event(ev)
                for ch in changes:
                    handle(ch)
                if changes:
                    settled()
                if stop() or watcher.due(clock()):
                    break
            failures = 0
        except Relist as exc:
            log.info("watch: relisting (%s)", exc)
        except WatchFailed as exc:
            failures += 1
            log.warning("watch: %s; retrying from %s", exc, watcher.resource_version)
            backoff(failures)
        except Exception as exc:  # the apiserver unreachable, a stream cut: back off, carry on
            failures += 1
            log.warning("watch: %s: %s; retrying from %s", type(exc).__name__, exc, watcher.resource_version)
            backoff(failures)
