"""kube-scheduler HTTP extender: the wire (``extender/v1``) and the answers, from the placement session.

The wire (``../shared/k8s/extender-protocol.md``): the Go structs have no JSON tags, so kube-scheduler
sends capitalised field names (``Pod``, ``NodeNames``, ``NodeNameToMetaVictims``) and decodes our
answer case-insensitively. We *emit* the canonical capitalised names (msgspec ``rename="pascal"``) and
*accept* any case (keys are matched case-insensitively before decoding). Embedded Pods and Nodes are
the API's camelCase JSON and go to ``translate``.

The answers come from the same engine the placement service decides with: the ``Planner``'s cluster
view and its built profile (``CachedScheduler``'s filters and scores; at bind, ``Session.schedule``
on the chosen node), so a node the extender passes is a node
placement would consider, with the same scores:

- **filter**: the feasible nodes among ``NodeNames`` (``nodeCacheCapable: true``) or ``Nodes``; every
  other node gets its first failing check from ``placement.explain.node_reasons``: a *static* one (the
  node can never hold the pod: GPU model, too few GPUs) goes in ``FailedAndUnresolvableNodes`` so
  kube-scheduler does not try preemption there, a *dynamic* one (full now) in ``FailedNodes``.
- **prioritize**: the profile's weighted score normalised to 0..100, scaled to ``0..MaxExtenderPriority``
  (10) and clamped (kube-scheduler does not clamp: an out-of-range score would silently dominate).
- **preempt**: the scheduler's candidate victims are kept on nodes that could ever hold the pod and
  vetoed (omitted) on nodes that never could; answered in the Meta form (UIDs) always.
- **bind**: creates the Binding (through the caller's ``bind`` function, ``api.bind`` in a cluster)
  with the GPU-assignment annotations of the decision the session makes for that node, and tells the
  caller (``on_bound``) so the service's view holds those GPUs before the next filter; the binder's
  watch of the extender's pods reports the binding (and later the pod's end) to every replica.

Bad input is the caller's fault and says so: malformed JSON, a missing ``Pod``, a pod the translation
refuses, or node names the cache does not know raise ``BadRequest`` (HTTP 400 in the server), never an
internal error. A logical "no" (no node fits) is HTTP 200 with the verdicts, as kube-scheduler expects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from gpuaware.k8s.objects import ASSIGNED, BindOutcome, assignment_annotations
from gpuaware.k8s.translate import TranslationError, pod_pending
from gpuaware.placement import Planner, PodRequest, Session, node_reasons
from gpuaware.schemas import GpuSlice, PodPending

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "VERBS",
    "BadRequest",
    "BindingArgs",
    "BindingResult",
    "Extender",
    "FilterResult",
    "HostPriority",
    "MetaPod",
    "MetaVictims",
    "PreemptionResult",
    "decode_args",
]

MAX_EXTENDER_PRIORITY = 10
VERBS = ("filter", "prioritize", "preempt", "bind")


class BadRequest(ValueError):
    """The request cannot be answered as sent (HTTP 400 with this message)."""


class _Wire(msgspec.Struct, rename="pascal", kw_only=True):
    pass


class FilterResult(_Wire):
    nodes: Any = None
    node_names: list[str] | None = None
    failed_nodes: dict[str, str] | None = None
    failed_and_unresolvable_nodes: dict[str, str] | None = None
    error: str = ""


class HostPriority(_Wire):
    host: str
    score: int


class BindingArgs(_Wire):
    pod_name: str
    pod_namespace: str
    pod_uid: str = msgspec.field(name="PodUID")
    node: str


class BindingResult(_Wire):
    error: str = ""


class MetaPod(_Wire):
    uid: str = msgspec.field(name="UID")


class MetaVictims(_Wire):
    pods: list[MetaPod]
    num_pdb_violations: int = msgspec.field(default=0, name="NumPDBViolations")


class PreemptionResult(_Wire):
    node_name_to_meta_victims: dict[str, MetaVictims] = msgspec.field(default_factory=dict)


_enc = msgspec.json.Encoder()
_HOST = b'{"Host":'
_SCORE = [b',"Score":%d}' % i for i in range(MAX_EXTENDER_PRIORITY + 1)]


def _filter_json(passed: list[bytes], failed: list[bytes], unresolvable: list[bytes]) -> msgspec.Raw:
    """``ExtenderFilterResult`` with every field, in Go's order (``Nodes`` null: nodeCacheCapable)."""
    return msgspec.Raw(b'{"Nodes":null,"NodeNames":[' + b",".join(passed) + b'],"FailedNodes":{' + b",".join(failed)
                       + b'},"FailedAndUnresolvableNodes":{' + b",".join(unresolvable) + b'},"Error":""}')


_FIELDS = {
    "filter": ("Pod", "Nodes", "NodeNames"),
    "prioritize": ("Pod", "Nodes", "NodeNames"),
    "preempt": ("Pod", "NodeNameToVictims", "NodeNameToMetaVictims"),
    "bind": ("PodName", "PodNamespace", "PodUID", "Node"),
}
_decoder = msgspec.json.Decoder()


def _ci(obj: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The object's keys matched to `names` case-insensitively (as Go's decoder does)."""
    low = {n.lower(): n for n in names}
    return {low[k.lower()]: v for k, v in obj.items() if k.lower() in low}


def decode_args(verb: str, body: bytes) -> dict[str, Any]:
    """A request body as ``{canonical field: value}``; raises ``BadRequest``."""
    if verb not in _FIELDS:
        raise BadRequest(f"unknown verb {verb!r}; this extender answers {', '.join(VERBS)}")
    try:
        obj = _decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"{verb}: the body is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise BadRequest(f"{verb}: expected a JSON object, got {type(obj).__name__}")
    return _ci(obj, _FIELDS[verb])


def _victim_uids(victims: Any, node: str) -> list[str]:
    if not isinstance(victims, dict):
        raise BadRequest(f"preempt: victims of node {node!r} are not an object")
    pods = _ci(victims, ("Pods",)).get("Pods") or []
    out = []
    for p in pods:
        if not isinstance(p, dict):
            raise BadRequest(f"preempt: a victim of node {node!r} is not an object")
        uid = _ci(p, ("UID",)).get("UID") or (p.get("metadata") or {}).get("uid")
        if not uid:
            raise BadRequest(f"preempt: a victim of node {node!r} has no UID")
        out.append(str(uid))
    return out


@dataclass(slots=True)
class Extender:
    """Answers the four verbs from `planner`'s view. `request_of` turns a pending pod into the engine's
    request (the placement service's conversion); `bind(namespace, name, uid, node, annotations)`
    creates the Binding."""

    planner: Planner
    request_of: Callable[[PodPending], PodRequest]
    bind_fn: Callable[[str, str, str, str, Mapping[str, str]], BindOutcome] | None = None
    gpus_of: Callable[[str], Sequence[Any]] | None = None
    """a node's GPUs by slot (``GpuInfo``), for the assignment annotations at bind time"""
    cluster: str = "default"
    source: str = "extender"
    pods: dict[str, Mapping[str, Any]] | None = None
    """pods seen at filter time, by UID, for bind (which names the pod only)"""
    on_bound: Callable[[BindingArgs, tuple[GpuSlice, ...], str], None] | None = None
    """called after a successful bind (the service commits it to its view at once)"""

    _translated: dict[tuple[Any, Any], PodPending] = field(default_factory=dict)
    _scored: tuple[Any, tuple[np.ndarray, np.ndarray, Any]] | None = None
    """the last pod's feasible nodes and scores, by (pod uid, resourceVersion, cluster uid, generation,
    framework): prioritize follows filter for the same pod on an unchanged cluster and reuses them"""
    _wire_for: Any = None
    _wire: tuple[list[bytes], list[bytes]] = ([], [])
    _host_entries: list[list[bytes]] = field(default_factory=list)
    """per cluster row, the whole ``{"Host":"n","Score":s}`` for each score 0..10 (built with ``_wire``)"""
    """pods translated, by (uid, resourceVersion): kube-scheduler sends the same object to every verb"""

    def __post_init__(self) -> None:
        if self.pods is None:
            self.pods = {}

    # -- the verbs ----------------------------------------------------------------------------------

    def answer(self, verb: str, body: bytes) -> Any:
        """The response object for one request (encode with ``msgspec.json.encode``)."""
        args = decode_args(verb, body)
        if verb == "filter":
            return self.filter(args)
        if verb == "prioritize":
            return self.prioritize(args)
        if verb == "preempt":
            return self.preempt(args)
        return self.bind(args)

    def _pod(self, args: Mapping[str, Any], verb: str) -> tuple[Mapping[str, Any], PodRequest]:
        pod = args.get("Pod")
        if not isinstance(pod, dict):
            raise BadRequest(f"{verb}: no Pod in the request")
        meta = pod.get("metadata") or {}
        if not isinstance(meta, dict):
            raise BadRequest(f"{verb}: the Pod's metadata is not an object")
        key = (meta.get("uid"), meta.get("resourceVersion"))
        cached = isinstance(key[0], str) and isinstance(key[1], str) and bool(key[1])
        pending = self._translated.get(key) if cached else None  # filter then prioritize: the same pod object
        if pending is None:
            try:
                pending = pod_pending(pod, source=self.source, cluster=self.cluster)
            except TranslationError as exc:
                raise BadRequest(f"{verb}: {exc}") from None
            if cached:
                if len(self._translated) >= 4096:
                    self._translated.pop(next(iter(self._translated)))
                self._translated[key] = pending
        try:
            req = self.request_of(pending)
        except ValueError as exc:
            raise BadRequest(f"{verb}: {exc}") from None
        assert self.pods is not None
        self.pods[pending.pod_uid] = pod
        return pod, req

    def _names(self, args: Mapping[str, Any], verb: str) -> list[str]:
        names = args.get("NodeNames")
        if names is None:
            nodes = args.get("Nodes")
            if isinstance(nodes, dict):
                items = _ci(nodes, ("items",)).get("items") or []
                names = [(n.get("metadata") or {}).get("name") for n in items if isinstance(n, dict)]
        if not isinstance(names, list):
            raise BadRequest(f"{verb}: neither NodeNames nor Nodes lists node names")
        return names

    def _rows(self, names: Sequence[str], verb: str) -> np.ndarray:
        if not self.planner.ensure_cluster():
            raise BadRequest(f"{verb}: the extender's node cache is empty (no inventory yet)")
        cluster = self.planner.ledger.cluster
        assert cluster is not None
        index = cluster.index
        try:
            return np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=len(names))
        except (KeyError, TypeError):
            unknown = [str(n) for n in names if not isinstance(n, str) or n not in index]
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise BadRequest(f"{verb}: node(s) not in the extender's cache: {shown}") from None

    def _feasible(self, req: PodRequest, pod: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, Any]:
        fw = self.planner.framework
        cluster = self.planner.ledger.cluster
        assert fw is not None and cluster is not None
        meta = pod.get("metadata") or {}
        key = (meta.get("uid"), meta.get("resourceVersion"), cluster.uid, cluster.generation, id(fw))
        if key[1] and self._scored is not None and self._scored[0] == key:
            return self._scored[1]  # prioritize after filter: the same pod, nothing changed since
        snap = cluster.snapshot()
        try:
            nodes, totals = fw.scheduler.scores(req, snap)
        except RuntimeError:  # the profile says no node can ever hold it: none is feasible
            nodes, totals = np.empty(0, dtype=np.int64), np.empty(0)
        self._scored = (key, (nodes, totals, snap)) if key[1] else None
        return nodes, totals, snap

    def _wire_names(self) -> tuple[list[bytes], list[bytes]]:
        """Per cluster row: the node's name as JSON (``"n"``) and as a map key (``"n":``), built once per
        node set. The verdicts for 1,000 nodes are then joined as bytes, not built as 1,000 objects."""
        cluster = self.planner.ledger.cluster
        assert cluster is not None
        if self._wire_for is not cluster.node_names:
            quoted = [_enc.encode(n) for n in cluster.node_names]
            self._wire = (quoted, [q + b":" for q in quoted])
            self._host_entries = [[_HOST + q + score for score in _SCORE] for q in quoted]
            self._wire_for = cluster.node_names
        return self._wire

    def filter(self, args: Mapping[str, Any]) -> msgspec.Raw:
        """The ``ExtenderFilterResult`` (see the module docstring), as encoded JSON."""
        pod, req = self._pod(args, "filter")
        names = self._names(args, "filter")
        rows = self._rows(names, "filter")
        quoted, keys = self._wire_names()
        if req.num_gpu == 0:  # not a GPU pod: no opinion, every node passes
            return _filter_json([quoted[r] for r in rows.tolist()], [], [])
        nodes, _totals, snap = self._feasible(req, pod)
        ok = np.zeros(snap.num_nodes, dtype=bool)
        ok[nodes] = True
        passing = ok[rows]
        passed = [quoted[r] for r in rows[passing].tolist()]
        failed: list[bytes] = []
        unresolvable: list[bytes] = []
        if len(passed) < len(names):
            reason, static = node_reasons(req, snap)
            messages: dict[str, bytes] = {}
            for r in rows[~passing].tolist():
                code = reason[r] or "rejected_by_policy"
                text = messages.get(code)
                if text is None:
                    text = messages[code] = _enc.encode(_message(code, req))
                (unresolvable if static[r] else failed).append(keys[r] + text)
        return _filter_json(passed, failed, unresolvable)

    def prioritize(self, args: Mapping[str, Any]) -> msgspec.Raw:
        """The ``HostPriorityList`` for the hosts asked, in their order, as encoded JSON."""
        pod, req = self._pod(args, "prioritize")
        names = self._names(args, "prioritize")
        rows = self._rows(names, "prioritize")
        self._wire_names()
        if req.num_gpu == 0:
            ext = np.zeros(len(rows), dtype=np.int64)
        else:
            nodes, totals, snap = self._feasible(req, pod)
            fw = self.planner.framework
            assert fw is not None
            per_node = np.zeros(snap.num_nodes, dtype=np.float64)  # infeasible nodes score 0
            per_node[nodes] = totals / (fw.scheduler.total_weight or 1)
            ext = np.rint(np.clip(per_node[rows], 0.0, 100.0) * (MAX_EXTENDER_PRIORITY / 100)).astype(np.int64)
        entries = self._host_entries
        return msgspec.Raw(b"[" + b",".join([entries[r][e] for r, e in zip(rows.tolist(), ext.tolist(), strict=True)])
                           + b"]")

    def preempt(self, args: Mapping[str, Any]) -> PreemptionResult:
        _pod, req = self._pod(args, "preempt")
        meta = args.get("NodeNameToMetaVictims")
        full = args.get("NodeNameToVictims")
        cand = meta if meta is not None else full
        if cand is None:
            return PreemptionResult()
        if not isinstance(cand, dict):
            raise BadRequest("preempt: NodeNameToMetaVictims / NodeNameToVictims is not an object")
        names = list(cand)
        rows = self._rows(names, "preempt")
        cluster = self.planner.ledger.cluster
        assert cluster is not None
        _reason, static = node_reasons(req, cluster.snapshot())
        out: dict[str, MetaVictims] = {}
        for n, r in zip(names, rows, strict=True):
            uids = _victim_uids(cand[n], n)
            if static[r] or not uids:  # can never hold the pod, or nothing to evict: veto
                continue
            pdb = _ci(cand[n], ("NumPDBViolations",)).get("NumPDBViolations") or 0
            out[n] = MetaVictims(pods=[MetaPod(uid=u) for u in uids], num_pdb_violations=int(pdb))
        return PreemptionResult(node_name_to_meta_victims=out)

    def bind(self, args: Mapping[str, Any]) -> BindingResult:
        try:
            b = msgspec.convert(args, BindingArgs)
        except msgspec.ValidationError as exc:
            raise BadRequest(f"bind: {exc}") from None
        self._rows([b.node], "bind")
        if self.bind_fn is None:
            return BindingResult(error="this extender is not configured to bind")
        assert self.pods is not None
        pod = self.pods.pop(b.pod_uid, None)
        annotations: dict[str, str] = {}
        slices: tuple[GpuSlice, ...] = ()
        if pod is not None:
            try:
                slices, annotations = self.assignment(pod, b.node)
            except TranslationError as exc:
                raise BadRequest(f"bind: {exc}") from None
        outcome = self.bind_fn(b.pod_namespace, b.pod_name, b.pod_uid, b.node, annotations)
        if outcome.ok and self.on_bound is not None:
            self.on_bound(b, slices, annotations.get(ASSIGNED.DECISION, ""))
        return BindingResult(error="" if outcome.ok else outcome.message or outcome.reason)

    def assignment(self, pod: Mapping[str, Any], node: str) -> tuple[tuple[GpuSlice, ...], dict[str, str]]:
        """The GPUs the profile's selector picks for `pod` on `node`, and their assignment annotations
        (with the decision id ``<cluster>/<uid>/extender`` the binder's watch reports the binding under)."""
        pending = pod_pending(pod, source=self.source, cluster=self.cluster)
        req = self.request_of(pending)
        decision = {ASSIGNED.DECISION: f"{self.cluster}/{pending.pod_uid}/extender"}
        if req.num_gpu == 0 or self.gpus_of is None:
            return (), decision
        fw = self.planner.framework
        cluster = self.planner.ledger.cluster
        assert fw is not None and cluster is not None
        only = np.ones(cluster.num_nodes, dtype=bool)
        only[cluster.index[node]] = False
        # the placement session's own choice on that node (Filter, Score, GPU selection)
        d = Session(cluster, fw, actions=("allocate",), exclude=lambda _p: only).schedule(req)
        if not hasattr(d, "gpus"):
            return (), decision
        gpus = self.gpus_of(node)
        sl = []
        for slot in d.gpus:
            g = gpus[slot]
            mem = req.gpu_memory_mib or g.memory_mib * req.gpu_milli // 1000
            sl.append(GpuSlice(gpu_uuid=g.uuid, gpu_index=g.index, gpu_milli=req.gpu_milli,
                               memory_mib=min(mem, g.memory_mib), mig_profile=pending.mig_profile))
        return tuple(sl), assignment_annotations(node, sl, pod=pod, decision_id=decision[ASSIGNED.DECISION])


_MESSAGES = {
    "too_few_gpus": "node has fewer GPUs than the {n} asked",
    "no_matching_gpu_type": "GPU model not among those asked ({types})",
    "missing_gpu_capability": "GPU model lacks a capability asked",
    "insufficient_gpu_memory": "not enough GPU memory",
    "insufficient_cpu": "insufficient cpu",
    "insufficient_memory": "insufficient memory",
    "topology_unsatisfiable": "the GPUs asked cannot sit on one NVLink island / NUMA node",
    "unhealthy_gpus": "would fit only on unhealthy (quarantined or degraded) GPUs",
    "insufficient_gpu": "insufficient free GPU: asked {n} x {milli}/1000",
    "rejected_by_policy": "rejected by the placement profile",
}


def _message(code: str, req: PodRequest) -> str:
    text = _MESSAGES.get(code, code)
    return f"{code}: " + text.format(n=req.num_gpu, milli=req.gpu_milli, types=", ".join(req.gpu_types) or "any")
