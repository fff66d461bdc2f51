"""The drill's reads after a lost cluster node (its telemetry ledger, each stream's replicas): a
stream whose leader is still being elected answers nothing, so the drill asks again with the bus's
backoff, and gives up (raising the timeout) only after its last attempt. And the high-availability
invariants over what the streams would hold: each one passes on a clean handover and fails on the
loss or the double it is there to catch."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from gpuaware.cli import drill
from gpuaware.schemas import (
    DemandPredicted,
    DemandSeries,
    GpuForecast,
    GpuUtilPredicted,
    PodBound,
    PodFinished,
    PodOutcome,
    PodPreempted,
    QueueUsage,
    QuotaUsageReported,
)


class _Leaderless:
    """Answers stream info only after `silent` timeouts, as a stream between leaders does."""

    def __init__(self, silent: int) -> None:
        self.silent, self.asked = silent, 0

    async def stream_info(self, name: str) -> Any:
        self.asked += 1
        if self.asked <= self.silent:
            raise TimeoutError("nats: timeout")
        return SimpleNamespace(config=SimpleNamespace(num_replicas=3))


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    monkeypatch.setattr(drill.asyncio, "sleep", sleep)
    return waits


def test_a_read_is_asked_again_until_the_stream_answers(slept: list[float]) -> None:
    js = _Leaderless(silent=3)
    assert asyncio.run(drill._patiently(lambda: drill._replicas(js, "TELEMETRY"))) == 3
    assert js.asked == 4
    assert slept == [1.0, 2.0, 4.0]  # the bus's RetryPolicy doubling


def test_a_stream_that_never_answers_raises_after_the_last_attempt(slept: list[float]) -> None:
    js = _Leaderless(silent=100)
    with pytest.raises(TimeoutError):
        asyncio.run(drill._patiently(lambda: drill._replicas(js, "TELEMETRY"), attempts=4))
    assert js.asked == 4 and len(slept) == 3


def test_other_errors_are_not_asked_again(slept: list[float]) -> None:
    async def refused() -> int:
        raise PermissionError("not allowed")

    with pytest.raises(PermissionError):
        asyncio.run(drill._patiently(refused))
    assert slept == []


# --- the high-availability invariants (``ha_invariants``), over what the streams would hold ----------

def _demand(origin: float, source: str, step_s: float = drill.DEMAND_PATH_STEP_S) -> DemandPredicted:
    return DemandPredicted(source=source, emitted_at=origin, cluster="c", model="m", model_version="1",
                           issued_at=origin, start=origin + step_s, step_s=step_s, horizon_steps=1,
                           quantiles=(0.5,), series=(DemandSeries(metric="gpus_requested", values=((1.0,),)),))


def _gpu(origin: float, source: str) -> GpuUtilPredicted:
    return GpuUtilPredicted(source=source, emitted_at=origin, cluster="c", model="m", model_version="1",
                            issued_at=origin, start=origin + 600.0, step_s=600.0, horizon_steps=1, quantiles=(0.5,),
                            node="n1", gpus=(GpuForecast(gpu_uuid="GPU-1", values=((50.0,),)),))


def _kill(service: str) -> dict[str, Any]:
    return {"step": f"kill-leader:{service}@8+1", "kind": "kill-leader", "target": service, "takeover_s": 3.0}


def _forecasting(forecasts: list[Any]) -> tuple[dict[str, bool], dict[str, Any]]:
    return drill.ha_invariants([_kill("forecasting")], {"killed": ["forecasting"], "forecasts": forecasts})


NO_MINUTE_LOST = "forecasting: no minute of demand lost (origins contiguous)"
ONE_PUBLISHER = "forecasting: one publisher at a time"


def test_demand_minutes_handed_over_without_a_gap_pass_and_the_takeover_counts_as_one_switch() -> None:
    before = [_demand(60.0 * m, "forecasting/a") for m in range(1, 6)] + [_gpu(300.0, "forecasting/a")]
    after = [_demand(60.0 * m, "forecasting/b") for m in range(6, 10)]
    hours = [_demand(600.0, "forecasting/b", step_s=3600.0)]  # the hours-ahead path: not a minute
    checks, figures = _forecasting(before + after + hours)
    assert checks[NO_MINUTE_LOST] and checks[ONE_PUBLISHER]
    f = figures["forecasting"]
    assert f["demand_minutes"] == 9 and f["demand_gaps"] == [] and f["publisher_switches"] == 1
    assert f["demand_forecasts_by_step_s"] == {"600": 9, "3600": 1}


def test_a_minute_the_leader_change_lost_fails_and_says_where() -> None:
    before = [_demand(60.0 * m, "forecasting/a") for m in range(1, 6)]
    after = [_demand(60.0 * m, "forecasting/b") for m in range(7, 10)]  # minute 6 never published
    checks, figures = _forecasting(before + after)
    assert not checks[NO_MINUTE_LOST]
    assert figures["forecasting"]["demand_gaps"] == [[300.0, 120.0]]


def test_no_demand_minute_at_all_fails_rather_than_passing_empty() -> None:
    checks, _ = _forecasting([_gpu(60.0, "forecasting/a"), _demand(600.0, "forecasting/a", step_s=3600.0)])
    assert not checks[NO_MINUTE_LOST]


def test_two_publishers_taking_turns_more_often_than_the_leaders_killed_fail() -> None:
    fcs = [_demand(60.0 * m, "forecasting/a" if m % 2 else "forecasting/b") for m in range(1, 6)]
    checks, figures = _forecasting(fcs)
    assert figures["forecasting"]["publisher_switches"] == 4 and not checks[ONE_PUBLISHER]


def _bound(uid: str, queue: str) -> PodBound:
    return PodBound(source="binder", emitted_at=1.0, cluster="c", pod_uid=uid, pod_name=uid, namespace="ns",
                    node="n1", slices=(), bound_at=1.0, queue=queue)


def _report(running: dict[str, int], parents: dict[str, str | None]) -> QuotaUsageReported:
    return QuotaUsageReported(source="quota/b", emitted_at=2.0, cluster="c", as_of=2.0, queues=tuple(
        QueueUsage(queue=q, parent=parents.get(q), running_pods=n) for q, n in running.items()))


def test_what_the_binder_left_running_follows_its_events_in_order() -> None:
    events = [_bound("p1", "team-a"), _bound("p2", "team-b"), _bound("p3", "team-a"),
              PodFinished(source="binder", emitted_at=2.0, cluster="c", pod_uid="p1", pod_name="p1", namespace="ns",
                          outcome=PodOutcome.SUCCEEDED, finished_at=2.0),
              PodPreempted(source="binder", emitted_at=2.0, cluster="c", pod_uid="p2", pod_name="p2", namespace="ns",
                           node="n1", reason="reclaim", preempted_at=2.0, requeued=True),
              _bound("p2", "team-b"), msgspec.structs.replace(_bound("x", "team-a"), cluster="other")]
    assert drill.binder_running(events, "c") == {"p3": "team-a", "p2": "team-b"}


PARENTS: dict[str, str | None] = {"team-a": "org", "team-b": "org", "org": None, "default": None}


def test_a_report_counting_each_running_pod_once_per_queue_and_its_parents_matches() -> None:
    running = {"p1": "team-a", "p2": "team-a", "p3": "team-b", "p4": "recsys"}
    report = _report({"org": 3, "team-a": 2, "team-b": 1, "default": 0, "recsys": 1}, PARENTS)
    assert drill.quota_mismatch(report, running) == {}


def test_an_admission_lost_or_counted_twice_is_named_per_queue() -> None:
    running = {"p1": "team-a", "p2": "team-a", "p3": "team-b"}
    lost = _report({"org": 2, "team-a": 1, "team-b": 1}, PARENTS)
    assert drill.quota_mismatch(lost, running) == {"org": [2, 3], "team-a": [1, 2]}
    doubled = _report({"org": 4, "team-a": 2, "team-b": 2}, PARENTS)
    assert drill.quota_mismatch(doubled, running) == {"org": [4, 3], "team-b": [2, 1]}
    missing_queue = _report({"org": 3, "team-a": 2, "team-b": 1}, PARENTS)
    assert drill.quota_mismatch(missing_queue, {**running, "p4": "recsys"}) == {"recsys": [0, 1]}


def test_the_quota_invariant_is_what_the_settle_step_saw() -> None:
    usage = [_report({"default": 0}, PARENTS)]
    for settled, expect in ((True, True), (False, False), (None, False)):
        ha: dict[str, Any] = {"killed": ["quota"], "usage": usage}
        if settled is not None:
            ha["quota_settled"] = settled
        checks, _ = drill.ha_invariants([_kill("quota")], ha)
        name = next(n for n in checks if n.startswith("quota: no admission lost"))
        assert checks[name] is expect
