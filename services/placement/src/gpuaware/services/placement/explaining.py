"""`placement.explain`: why a pod is where it is, or why it fits nowhere, per node class.

Answers from the instance's view (leader or standby alike): a holding pod says where it is; a waiting
or a hypothetical pod (the request carries a `PodPending`) is explained by the planner against the
current cluster, with the quota service's dry-run verdict when asked. Every answer is also published
on `placement.pod.explained.v1` (audit; `explain_publish`), and a failure to record it never fails
the answer.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gpuaware import bus
from gpuaware.placement import HOLDING
from gpuaware.schemas import ExplainReply, ExplainRequest, Explanation, PlacementExplained, PodPending
from gpuaware.services.placement import convert
from gpuaware.services.placement.channels import EXPLAINED
from gpuaware.services.placement.quota_permit import QuotaPermit
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.services.placement.state import PlacementState

log = logging.getLogger(__name__)


class Explainer:
    """The `placement.explain` endpoint over one instance's view; `js` records each answer."""

    def __init__(self, state: PlacementState, quota: QuotaPermit, settings: PlacementSettings, js: Any,
                 source: str) -> None:
        self.state = state
        self.quota = quota
        self.settings = settings
        self.js = js
        self.source = source

    async def explain(self, req: ExplainRequest) -> ExplainReply:
        st = self.state
        if req.pod_uid is not None:
            entry = st.ledger.pods.get(req.pod_uid)
            if entry is None or entry.request is None:
                raise bus.ServiceError(404, f"pod {req.pod_uid} is not known to placement (never pending here, "
                                            "or already gone)")
            pod: PodPending | None = entry.payload
            if entry.phase in HOLDING:
                why = Explanation(schedulable=True, summary=f"{entry.phase.value} on {entry.node}",
                                  best_node=entry.node)
                return await self._explained(req, entry.uid, pod, why)
            if not st.ensure_cluster():
                raise bus.TransientError("no nodes in the cluster view yet", delay=1.0)
            result = st.explain_request(entry.request, req.max_node_classes)
        else:
            pod = req.pod
            assert pod is not None
            try:
                result = st.explain_pending(pod, req.max_node_classes)
            except RuntimeError as exc:
                raise bus.TransientError(str(exc), delay=1.0) from None
        admitted, quota_reason = None, ""
        if req.ask_quota and pod is not None:
            try:
                reply = await self.quota.ask(pod, result.best_node, None, True)
            except bus.TransientError as exc:
                reply, quota_reason = None, exc.reason
            if reply is not None:
                admitted, quota_reason = reply.admitted, reply.reason
        why = convert.explanation(result, quota_admitted=admitted, quota_reason=quota_reason)
        return await self._explained(req, pod.pod_uid if pod else str(req.pod_uid), pod, why)

    async def _explained(self, req: ExplainRequest, uid: str, pod: PodPending | None,
                         why: Explanation) -> ExplainReply:
        now = time.time()
        if self.settings.explain_publish and pod is not None:
            try:
                await bus.publish(self.js, EXPLAINED, PlacementExplained(
                    source=self.source, emitted_at=now, cluster=self.settings.cluster, pod_uid=uid,
                    pod_name=pod.pod_name, namespace=pod.namespace, explanation=why, explained_at=now), timeout=2.0)
            except Exception as exc:
                log.warning("explanation of %s not recorded (%s)", uid, exc)
        return ExplainReply(source=self.source, emitted_at=now, cluster=self.settings.cluster, pod_uid=uid,
                            explanation=why)


