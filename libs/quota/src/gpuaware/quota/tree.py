"""The queue tree: one declarative file (or, in a cluster, the ``GPUQueue`` objects), one validator.

Why it looks like this:

* ``QueueSpec`` is the Struct a ``GPUQueue`` custom resource carries as its ``spec`` (the quota
  service's Kubernetes mode builds the tree from them: ``gpuaware.k8s.QueueSet``); the
  embedded setup reads the same Structs from one YAML/JSON file (``QuotaConfig``). Decoding is
  msgspec's, so a wrong type or a negative amount is refused with the path to it.
* Amounts are per GPU type: ``guaranteed: {"*": {gpus: 8}, "A100-80GB": {gpus: 4}}``. ``"*"`` is
  the total over every type; a named type bounds only what the queue holds of that model.
  A pod counts against ``"*"`` and against the type it runs on; a type the queue does not name
  falls under its ``"*"`` amounts.
* ``validate`` is the only door from a file to a ``QueueTree``: cycles, unknown parents, unknown
  partition queues, children guaranteed more than their parent (over-commitment), a guarantee
  above the limit, a tree guaranteed more than the cluster holds -- all refused together, each
  with its reason, in a ``QuotaConfigError``; nothing is half-applied (the caller keeps the tree
  it had). A pod naming no queue is charged to ``default_queue``, and the reply says so.
* Victims' protections: a queue's ``min_runtime_s`` (a lease, inherited down the tree) and the
  tree's ``max_preemptions_per_pod`` (a cap per pod); ``reclaim.py`` applies both.
* Time windows change a queue's guarantee, limit or weight during some hours (a research queue
  gets more at night). Each window is validated as if it were the whole tree, so a window cannot
  over-commit either.
* Every amount is a whole number in ``[0, MAX_AMOUNT]``: the tree's arithmetic is int64 vectors.

Sample (one organisation, two teams, a strict partition for clinical work)::

    default_queue: research-misc
    half_life_s: 3600
    capacity: {"*": {gpus: 64, gpu_milli: 64000}}
    max_preemptions_per_pod: 2
    queues:
      - {name: org, guaranteed: {"*": {gpus: 64}}}
      - {name: research, parent: org, weight: 1, guaranteed: {"*": {gpus: 24}},
         windows: [{start: "20:00", end: "06:00", guaranteed: {"*": {gpus: 40}}}]}
      - {name: clinical, parent: org, weight: 1, priority: 100, guaranteed: {"*": {gpus: 16}}}
      - {name: research-misc, parent: research, min_runtime_s: 1800}
      - {name: genomics, parent: clinical, limit: {"*": {gpus: 16}}}
    partitions:
      - {name: clinical-nodes, nodes: [gpu-node-07, gpu-node-08], queues: [clinical]}
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated

import msgspec
import numpy as np
import yaml
from msgspec import Meta

__all__ = [
    "ANY_TYPE",
    "RESOURCES",
    "Amounts",
    "Partition",
    "QueueSpec",
    "QueueTree",
    "QuotaConfig",
    "QuotaConfigError",
    "TimeWindow",
    "load_config",
    "validate",
]

ANY_TYPE = "*"
RESOURCES = ("gpus", "gpu_milli", "gpu_memory_mib", "cpu_milli", "memory_mib")
"""the order of a resource vector everywhere in this package"""
UNBOUNDED = np.iinfo(np.int64).max // 4
MAX_AMOUNT = 2**40
"""the most any amount may be (about 1.1e12: a million times a large cluster): amounts become int64
resource vectors (whole GPUs times 1,000 as milli) and are summed over the tree, so a bound far below
``UNBOUNDED`` keeps that arithmetic exact; a larger number is refused with the path to it"""

NonNeg = Annotated[int, Meta(ge=0)]
Amount = Annotated[int, Meta(ge=0, le=MAX_AMOUNT)]
QueueName = Annotated[str, Meta(min_length=1, max_length=253)]
HourMinute = Annotated[str, Meta(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")]


class QuotaConfigError(ValueError):
    """The configuration is refused; ``reasons`` lists every problem found (the running tree stays)."""

    def __init__(self, reasons: Iterable[str]) -> None:
        self.reasons = tuple(reasons)
        super().__init__("; ".join(self.reasons))


class Amounts(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An amount of each resource. Unset fields of a guarantee are 0; of a limit, unbounded."""

    gpus: Amount | None = None
    """whole GPUs (devices a pod holds entirely)"""
    gpu_milli: Amount | None = None
    """GPU compute in thousandths of a GPU, whole and fractional pods alike"""
    gpu_memory_mib: Amount | None = None
    cpu_milli: Amount | None = None
    memory_mib: Amount | None = None

    def vector(self, unset: int) -> np.ndarray:
        """As a resource vector; GPU compute left unset follows whole GPUs (``gpus: 4`` = 4,000 milli)
        and whole GPUs left unset in a guarantee follow compute (4,500 milli = 4 whole GPUs)."""
        v = np.array([unset if (x := getattr(self, r)) is None else x for r in RESOURCES], dtype=np.int64)
        if self.gpu_milli is None and self.gpus is not None:
            v[1] = 1000 * self.gpus
        if self.gpus is None and self.gpu_milli is not None and unset == 0:
            v[0] = self.gpu_milli // 1000
        return v


PerType = dict[str, Amounts]
"""amounts by GPU type (``"*"`` = every type together)"""


class TimeWindow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """During [start, end) (UTC, wrapping past midnight) on ``days`` (0 = Monday; empty = every day),
    these replace the queue's own guarantee / limit / weight."""

    start: HourMinute
    end: HourMinute
    days: tuple[Annotated[int, Meta(ge=0, le=6)], ...] = ()
    guaranteed: PerType | None = None
    limit: PerType | None = None
    weight: Annotated[float, Meta(gt=0)] | None = None

    def active(self, t: float) -> bool:
        when = dt.datetime.fromtimestamp(t, dt.UTC)
        minute = when.hour * 60 + when.minute
        s, e = (int(x[:2]) * 60 + int(x[3:]) for x in (self.start, self.end))
        inside = s <= minute < e if s <= e else (minute >= s or minute < e)
        if not inside:
            return False
        # a window wrapping past midnight belongs to the day it started
        day = when.weekday() if (s <= e or minute >= s) else (when.weekday() - 1) % 7
        return not self.days or day in self.days


class QueueSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One queue (the ``spec`` of a ``GPUQueue`` custom resource)."""

    name: QueueName
    parent: QueueName | None = None
    tenant: QueueName | None = None
    """who is billed; default: the queue's ancestor just below the root (its team), or itself"""
    guaranteed: PerType = msgspec.field(default_factory=dict)
    """deserved capacity, never lent away for good: reclaimed from borrowers when asked for"""
    limit: PerType | None = None
    """at most this, borrowing included; None = no bound besides the cluster"""
    weight: Annotated[float, Meta(gt=0)] = 1.0
    """share of capacity above the guarantees, against sibling queues"""
    priority: int = 0
    """a higher-priority queue's pods reclaim first and are reclaimed last"""
    windows: tuple[TimeWindow, ...] = ()
    min_runtime_s: Annotated[float, Meta(ge=0)] | None = None
    """the queue's lease: a pod of it is neither reclaimed nor taken for a turn before it ran this
    long since it last started (``reclaim.py`` says who may still take it); None = the parent's
    (``QueueTree.min_runtime``), 0 = no lease"""


class Partition(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Nodes reserved to some queues (and their descendants); nobody else runs there, even when idle."""

    name: QueueName
    nodes: tuple[QueueName, ...]
    queues: tuple[QueueName, ...]


class QuotaConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The whole declarative file."""

    queues: tuple[QueueSpec, ...]
    partitions: tuple[Partition, ...] = ()
    default_queue: QueueName | None = None
    """where a pod naming no queue (or ``default``) goes; None = such pods are refused"""
    half_life_s: Annotated[float, Meta(gt=0)] = 3600.0
    """usage history halves every this many seconds (fair share over time)"""
    open_queues: bool = False
    """a queue the file does not name is accepted as a new root queue with no guarantee and no limit
    (the service's default when no file is configured: every queue unlimited, quota only accounts)"""
    capacity: PerType | None = None
    """the cluster's size; when given, the root's guarantees must fit in it and admission without a
    chosen node checks it"""
    max_preemptions_per_pod: NonNeg | None = 2
    """a pod preempted this many times (for any reason, across its re-queues) is never named a victim
    by quota's reclaim plans or turns again; None = no cap, 0 = quota never names a victim"""


def load_config(source: str | Path | bytes) -> QuotaConfig:
    """Decode a YAML or JSON file (or text) into a ``QuotaConfig``; refuses bad types with the path."""
    text = Path(source).read_bytes() if isinstance(source, Path) else source
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise QuotaConfigError([f"not YAML/JSON: {exc}"]) from None
    try:
        return msgspec.convert(raw, QuotaConfig)
    except msgspec.ValidationError as exc:
        raise QuotaConfigError([str(exc)]) from None


class QueueTree:
    """A validated tree: parents, children, tenants and the amounts in force at a time ``t``."""

    def __init__(self, config: QuotaConfig) -> None:
        self.config = config
        self.specs: dict[str, QueueSpec] = {q.name: q for q in config.queues}
        self.parent: dict[str, str | None] = {q.name: q.parent for q in config.queues}
        self.children: dict[str, list[str]] = {q.name: [] for q in config.queues}
        for q in config.queues:
            if q.parent is not None:
                self.children[q.parent].append(q.name)
        self.leaves = frozenset(n for n, c in self.children.items() if not c)
        self.partition_of_node: dict[str, Partition] = {n: p for p in config.partitions for n in p.nodes}
        self.gpu_types = sorted({t for q in config.queues for m in self._maps(q) for t in m} | {ANY_TYPE})
        self._chain: dict[str, tuple[str, ...]] = {}
        self.tenant = {n: self._tenant(n) for n in self.specs}

    @staticmethod
    def _maps(q: QueueSpec) -> list[PerType]:
        maps = [q.guaranteed, *([q.limit] if q.limit else [])]
        for w in q.windows:
            maps += [m for m in (w.guaranteed, w.limit) if m]
        return maps

    def ancestors(self, name: str) -> tuple[str, ...]:
        """``name`` and every queue above it, nearest first."""
        chain = self._chain.get(name)
        if chain is None:
            out = [name]
            while (p := self.parent[out[-1]]) is not None:
                out.append(p)
            chain = self._chain[name] = tuple(out)
        return chain

    def _tenant(self, name: str) -> str:
        chain = self.ancestors(name)
        for q in chain:
            if self.specs[q].tenant:
                return self.specs[q].tenant  # type: ignore[return-value]  # a tenant that passed the truthiness test is a str
        return chain[-2] if len(chain) >= 2 else chain[-1]

    def _window(self, name: str, t: float | None) -> TimeWindow | None:
        if t is None:
            return None
        return next((w for w in self.specs[name].windows if w.active(t)), None)

    def guaranteed(self, name: str, gpu_type: str = ANY_TYPE, t: float | None = None) -> np.ndarray:
        w = self._window(name, t)
        m = w.guaranteed if w is not None and w.guaranteed is not None else self.specs[name].guaranteed
        a = m.get(gpu_type, m.get(ANY_TYPE))
        return a.vector(0) if a is not None else np.zeros(len(RESOURCES), dtype=np.int64)

    def has_guarantee(self, name: str, t: float | None = None) -> bool:
        """Does the queue name a guarantee at all? One that names none is bounded by its ancestors'."""
        w = self._window(name, t)
        return bool(w.guaranteed if w is not None and w.guaranteed is not None else self.specs[name].guaranteed)

    def limit(self, name: str, gpu_type: str = ANY_TYPE, t: float | None = None) -> np.ndarray:
        w = self._window(name, t)
        m = w.limit if w is not None and w.limit is not None else self.specs[name].limit
        a = (m or {}).get(gpu_type, (m or {}).get(ANY_TYPE))
        return a.vector(UNBOUNDED) if a is not None else np.full(len(RESOURCES), UNBOUNDED, dtype=np.int64)

    def min_runtime(self, name: str) -> float:
        """The queue's lease in seconds: its own ``min_runtime_s``, else its nearest ancestor's, else 0."""
        return next((m for q in self.ancestors(name) if (m := self.specs[q].min_runtime_s) is not None), 0.0)

    def weight(self, name: str, t: float | None = None) -> float:
        w = self._window(name, t)
        return w.weight if w is not None and w.weight is not None else self.specs[name].weight

    def capacity(self, gpu_type: str = ANY_TYPE) -> np.ndarray | None:
        a = (self.config.capacity or {}).get(gpu_type)
        return None if a is None else a.vector(UNBOUNDED)

    def resolve(self, queue: str) -> tuple[str | None, str]:
        """(the leaf queue a pod naming ``queue`` is charged to, or None; the reason)."""
        if queue in ("", "default") and queue not in self.specs:
            d = self.config.default_queue
            if d is None:
                return None, "queue_unknown: the pod names no queue and no default_queue is configured"
            return d, f"defaulted: the pod names no queue, charged to {d!r}"
        if queue not in self.specs:
            if not self.config.open_queues:
                return None, f"queue_unknown: no queue named {queue!r}"
            self._open(queue)
        if queue not in self.leaves:
            return None, f"queue_not_leaf: {queue!r} has child queues; pods go to a leaf queue"
        return queue, ""

    def _open(self, name: str) -> None:
        """Add an unlimited root leaf queue (``open_queues``)."""
        self.specs[name] = QueueSpec(name=name)
        self.parent[name] = None
        self.children[name] = []
        self.leaves = self.leaves | {name}
        self.tenant[name] = name

    def reserved_nodes(self) -> dict[str, frozenset[str]]:
        """Each node a strict partition reserves -> every queue allowed on it (the partition's queues
        and their descendants): what placement's strict-partitions filter keeps all others off."""
        out: dict[str, frozenset[str]] = {}
        for p in self.config.partitions:
            allowed = frozenset(q for q in self.specs if set(p.queues) & set(self.ancestors(q)))
            for n in p.nodes:
                out[n] = allowed
        return out

    def allowed_on(self, queue: str, node: str | None) -> Partition | None:
        """The strict partition that keeps ``queue`` off ``node`` (None = allowed)."""
        p = self.partition_of_node.get(node) if node is not None else None
        if p is None or set(p.queues) & set(self.ancestors(queue)):
            return None
        return p


def _sum_children(tree: QueueTree, name: str, gpu_type: str, t: float | None) -> np.ndarray:
    return sum((tree.guaranteed(c, gpu_type, t) for c in tree.children[name]),
               np.zeros(len(RESOURCES), dtype=np.int64))


def _amount_problems(tree: QueueTree, t: float | None, label: str) -> list[str]:
    out: list[str] = []
    for name in tree.specs:
        for gt in tree.gpu_types:
            g, lim = tree.guaranteed(name, gt, t), tree.limit(name, gt, t)
            for i in np.flatnonzero(g > lim):
                out.append(f"{name}{label}: guaranteed {RESOURCES[i]}[{gt}] {g[i]} above its limit {lim[i]}")
            kids = _sum_children(tree, name, gt, t)
            own = tree.guaranteed(name, gt, t)
            if tree.children[name]:
                for i in np.flatnonzero(kids > own):
                    out.append(f"{name}{label}: over-committed, children guaranteed {RESOURCES[i]}[{gt}] "
                               f"{kids[i]} > its own {own[i]}")
    for gt in tree.gpu_types:
        cap = tree.capacity(gt)
        if cap is None:
            continue
        roots = sum((tree.guaranteed(r, gt, t) for r, p in tree.parent.items() if p is None),
                    np.zeros(len(RESOURCES), dtype=np.int64))
        for i in np.flatnonzero(roots > cap):
            out.append(f"tree{label}: over-committed, root queues guaranteed {RESOURCES[i]}[{gt}] {roots[i]} "
                       f"> cluster capacity {cap[i]}")
    return out


def validate(config: QuotaConfig | Mapping | str | Path | bytes) -> QueueTree:
    """The one validator: a ``QueueTree``, or ``QuotaConfigError`` with every reason found."""
    if not isinstance(config, QuotaConfig):
        if isinstance(config, Mapping):
            try:
                config = msgspec.convert(config, QuotaConfig)
            except msgspec.ValidationError as exc:
                raise QuotaConfigError([str(exc)]) from None
        else:
            config = load_config(config)
    problems: list[str] = []
    names = [q.name for q in config.queues]
    if not names:
        problems.append("no queues")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        problems.append(f"duplicate queue names: {dup}")
    known = set(names)
    for q in config.queues:
        if q.parent is not None and q.parent not in known:
            problems.append(f"{q.name}: unknown parent {q.parent!r}")
    parent = {q.name: q.parent for q in config.queues}
    for q in config.queues:  # a cycle: following parents comes back to where it started
        seen, cur = [q.name], parent.get(q.name)
        while cur is not None and cur in parent and cur not in seen:
            seen.append(cur)
            cur = parent[cur]
        if cur == q.name:
            problems.append(f"cycle: {' -> '.join([*seen, q.name])}")
            break
    for p in config.partitions:
        for n in p.queues:
            if n not in known:
                problems.append(f"partition {p.name}: unknown queue {n!r}")
    nodes = [n for p in config.partitions for n in p.nodes]
    if len(nodes) != len(set(nodes)):
        problems.append("a node is in more than one partition")
    for q in config.queues:
        if q.min_runtime_s is not None and not math.isfinite(q.min_runtime_s):
            problems.append(f"{q.name}: min_runtime_s must be a finite number of seconds, got {q.min_runtime_s}")
    if problems:
        raise QuotaConfigError(problems)
    tree = QueueTree(config)
    if config.default_queue is not None and config.default_queue not in tree.leaves:
        problems.append(f"default_queue {config.default_queue!r} is not a leaf queue")
    problems += _amount_problems(tree, None, "")
    for q in config.queues:
        for w in q.windows:  # each window checked as the whole tree would be while it is in force
            probe = _window_probe(w)
            problems += _amount_problems(tree, probe, f" (window {w.start}-{w.end})")
    if problems:
        raise QuotaConfigError(dict.fromkeys(problems))
    return tree


def _window_probe(w: TimeWindow) -> float:
    """A time inside the window (on a day it applies) to evaluate the tree at."""
    day = w.days[0] if w.days else 0
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=day)  # 2024-01-01 is a Monday
    return (base + dt.timedelta(hours=int(w.start[:2]), minutes=int(w.start[3:]))).timestamp()
