"""QuotaPermit's reclaim questions without a server (quota's answers stubbed): advice that never fails a
publish, bounded per publish, remembered while quota is away."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from placement_service_helpers import inventory, pending

from gpuaware import bus
from gpuaware.placement import POLICIES
from gpuaware.schemas.quota import AdmitReply, ReclaimCandidate, Resources
from gpuaware.services.placement.quota_permit import MAX_ASKS_PER_PASS, QuotaPermit
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.services.placement.state import Decided, PlacementState, Unschedulable


def _full(parked: int) -> tuple[PlacementState, list[Any]]:
    st = PlacementState(cluster_name="c", source="placement/test", policy_name="WasteGradient",
                        policy_config=POLICIES["WasteGradient"])
    st.apply_inventory(inventory("c", "a", gpus=2))
    for i in range(2):
        assert isinstance(st.on_pending(pending("c", f"b{i}"))[0], Decided)
    verdicts = [o for i in range(parked) for o in st.on_pending(pending("c", f"o{i}"))]
    assert all(isinstance(v, Unschedulable) for v in verdicts)
    return st, verdicts


class Stub(QuotaPermit):
    def __init__(self, st: PlacementState, answer: Any) -> None:
        settings = msgspec.convert({"cluster": "c", "quota_recheck_s": 7.0}, PlacementSettings)
        self.delays: list[float] = []
        super().__init__(None, settings, "placement/test", st, self.delays.append)
        self.answer = answer
        self.asked: list[str] = []

    async def ask(self, pod, node, gpu_milli, dry_run) -> AdmitReply | None:  # type: ignore[override]  # a fake: its parameters are looser than the protocol's
        assert node is None and dry_run
        self.asked.append(pod.pod_uid)
        return self.answer(pod)


def _admitted(pod) -> AdmitReply:
    return AdmitReply(source="quota", emitted_at=time.time(), cluster="c", pod_uid=pod.pod_uid, admitted=True,
                      queue="q", reason="unlimited")


async def test_a_burst_is_asked_about_in_bounded_passes() -> None:
    st, verdicts = _full(MAX_ASKS_PER_PASS + 6)
    q = Stub(st, _admitted)
    out = await q.permit(list(verdicts))
    assert out == verdicts  # no plan: the verdicts are published as they were
    assert len(q.asked) == MAX_ASKS_PER_PASS and len(q.due) == 6 and 0.0 in q.delays
    out = await q.permit([])  # the next pass: the rest
    assert out == [] and len(q.asked) == MAX_ASKS_PER_PASS + 6 and not q.due


async def test_a_quota_that_times_out_or_is_away_never_fails_the_publish() -> None:
    st, verdicts = _full(3)

    def timeout(pod):
        raise bus.TransientError("quota did not answer", delay=2.0)

    q = Stub(st, timeout)
    assert await q.permit(list(verdicts)) == verdicts
    assert set(q.due) == {"o0", "o1", "o2"} and q.delays == [2.0]
    q2 = Stub(st, lambda pod: None)  # nobody listens
    assert await q2.permit(list(verdicts)) == verdicts
    assert set(q2.due) == {"o0", "o1", "o2"} and q2.delays == [7.0]


async def test_a_plan_that_cannot_be_executed_is_asked_for_again_with_backoff() -> None:
    st, verdicts = _full(1)

    def plan(pod):
        return AdmitReply(source="quota", emitted_at=time.time(), cluster="c", pod_uid=pod.pod_uid, admitted=True,
                          queue="q", reason="guaranteed", would_reclaim=(ReclaimCandidate(
                              pod_uid="ghost", pod_name="ghost", namespace="ns", queue="b", node="a",
                              frees=Resources(gpu_milli=1000)),))

    q = Stub(st, plan)
    assert await q.permit(list(verdicts)) == verdicts  # quota named a pod placement does not see
    assert "o0" in q.due and q.delays == [1.0]
    q.due["o0"] = 0.0
    await q.permit([])
    assert q.delays == [1.0, 2.0]  # the bus's backoff: 1 s, doubling
