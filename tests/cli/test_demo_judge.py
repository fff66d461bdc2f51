"""A demo that says when it cannot judge: the judgement over the runs' facts, the services' lag measured
from the events the demo received, the headline and the report of a run too short or too starved to
compare, and numbers formatted for people (no ``0E-20``, no ``82.000``, "no data" for empty charts)."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_demo_units import C, _cfg, _result, decided, feed, pending, unschedulable

from gpuaware.cli.demo_analysis import analyse, compare
from gpuaware.cli.demo_format import human, plain
from gpuaware.cli.demo_judge import ArmFacts, Bounds, arm_facts, effective_speed, judgeable, lag_figures
from gpuaware.cli.demo_panels import _draw
from gpuaware.cli.demo_record import RunLog
from gpuaware.cli.demo_report import write_html, write_plots
from gpuaware.cli.demo_summary import headline

DAY = 86_400.0


def arm(label: str, decided_: int = 200, *, reached: bool = True, replayed: float = DAY, planned: int = 0,
        reached_faults: int = 0, lag: dict | None = None, workload: int = 400) -> ArmFacts:
    return ArmFacts(label=label, pods_decided=decided_, workload_pods=workload, reached_end=reached,
                    virtual_s=replayed, window_s=DAY, faults_planned=planned, faults_reached=reached_faults,
                    lag=lag or {})


def lag(p95_virtual: float, samples: int = 100) -> dict:
    return {"samples": samples, "p95_wall_s": p95_virtual / 576, "p95_virtual_s": p95_virtual, "effective_speed": 576.0}


# --- the judgement -------------------------------------------------------------------------------------


def test_a_full_quiet_run_is_judgeable() -> None:
    v = judgeable([arm("gpuaware", planned=3, reached_faults=3, lag=lag(60)), arm("baseline", lag=lag(45))],
                  slo_s=600)
    assert v.ok and v.reasons == () and v.headline() == ""
    assert v.as_json() == {"judgeable": True, "reasons": []}


def test_a_five_second_run_is_not_judged_and_says_every_reason() -> None:
    # the run of the problem report: 3 and 0 pods decided, a few virtual hours, the faults not reached
    v = judgeable([arm("gpuaware", 3, reached=False, replayed=3 * 3600, planned=3, reached_faults=0),
                   arm("baseline", 0, reached=False, replayed=2 * 3600)], slo_s=600)
    assert not v.ok
    text = " | ".join(v.reasons)
    assert "too few pods decided (gpuaware 3, baseline 0; at least 30 per run" in text
    assert "the gpuaware run replayed 3 of 24 virtual hours" in text
    assert "the baseline run replayed 2 of 24 virtual hours" in text
    assert "reached 0 of its 3 planned GPU faults" in text
    assert v.headline().startswith("NOT JUDGEABLE") and v.as_json()["judgeable"] is False


def test_services_that_lag_the_twin_make_the_run_unjudgeable() -> None:
    # p95 of 31 virtual minutes against a 10-minute SLO: over half of it
    starved = judgeable([arm("gpuaware", lag=lag(31 * 60)), arm("baseline", lag=lag(60))], slo_s=600)
    assert not starved.ok and len(starved.reasons) == 1
    assert "the services lagged the twin's clock in the gpuaware run" in starved.reasons[0]
    assert "31 virtual min" in starved.reasons[0]
    # just under the bound (half of 600 s), and too few samples to judge a p95 on: no lag reason
    assert judgeable([arm("gpuaware", lag=lag(299)), arm("baseline", lag=lag(5000, samples=3))], slo_s=600).ok
    # the bound is a share of the SLO: a 2-hour SLO tolerates 31 minutes
    assert judgeable([arm("gpuaware", lag=lag(31 * 60)), arm("baseline")], slo_s=7200).ok


def test_a_small_workload_needs_only_its_own_pods_decided() -> None:
    assert judgeable([arm("gpuaware", 12, workload=12), arm("baseline", 12, workload=12)], slo_s=600).ok
    assert not judgeable([arm("gpuaware", 11, workload=12), arm("baseline", 12, workload=12)], slo_s=600).ok
    assert not judgeable([arm("gpuaware")], slo_s=600, bounds=Bounds()).ok  # nothing to compare with


# --- the lag, from what the demo received ----------------------------------------------------------------


def test_the_log_times_each_pending_to_its_first_verdict() -> None:
    log = RunLog(C)
    log.on_event(pending("p", 0), "binder.pod.pending.v1", wall=100.0)
    log.on_event(pending("q", 0), "binder.pod.pending.v1", wall=100.5)
    log.on_event(unschedulable("q", "no_fit"), "placement.pod.unschedulable.v1", wall=101.0)  # an answer too
    log.on_event(decided("p"), "placement.pod.decided.v1", wall=102.0)
    log.on_event(decided("q"), "placement.pod.decided.v1", wall=150.0)  # a later verdict: not lag
    log.on_event(pending("p", 10, attempt=1), "binder.pod.pending.v1", wall=160.0)  # preempted, again
    log.on_event(decided("p", attempt=1), "placement.pod.decided.v1", wall=160.25)
    assert log.verdict_lags == [(100.5, 0.5), (100.0, 2.0), (160.0, 0.25)]
    assert log.awaiting_verdict == {}


def test_lag_is_converted_at_the_speed_the_twin_ran_then() -> None:
    # the twin ran at 576x for 10 s, slowed itself to 144x for 10 s, and jumped 5 hours in a quiet second
    clock = [(0.0, 0.0), (10.0, 5760.0), (20.0, 7200.0), (21.0, 7200.0 + 5 * 3600)]
    assert effective_speed(clock, 576.0) == pytest.approx((5760 + 1440 + 576) / 21)  # the jump counts as 576x
    assert effective_speed(clock[:1], 576.0) is None
    figures = lag_figures([(5.0, 1.0), (15.0, 1.0)], clock, 576.0)
    assert figures["p50_virtual_s"] == 144.0 and figures["p95_virtual_s"] == 576.0
    assert figures["p95_wall_s"] == 1.0 and figures["samples"] == 2 and figures["twin_slowed"] is True
    assert lag_figures([], [], 576.0) == {"samples": 0, "nominal_speed": 576.0, "effective_speed": None,
                                          "twin_slowed": False, "p50_wall_s": None, "p95_wall_s": None,
                                          "p50_virtual_s": None, "p95_virtual_s": None}
    json.dumps(figures, allow_nan=False)


def test_arm_facts_count_decided_pods_and_the_faults_the_replay_reached(tmp_path: Path) -> None:
    log = feed(RunLog(C), pending("p", 0), pending("q", 0), decided("p"))
    run = _result("gpuaware", log)
    run.health = {"faults": [{"at_s": 50.0}, {"at_s": 150.0}, {"at_s": 500.0}]}  # the run replayed 200 s
    facts = arm_facts("gpuaware", run, {}, 600.0, 576.0, 2)
    assert (facts.pods_decided, facts.faults_planned, facts.faults_reached) == (1, 3, 2)
    assert facts.lag["samples"] == 1  # timed as the events were fed


# --- the headline and the report --------------------------------------------------------------------------


def test_the_headline_of_an_unjudgeable_run_claims_no_comparison(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    ours = _result("gpuaware", feed(RunLog(C), pending("p", 0), decided("p")))
    base = _result("baseline", feed(RunLog(C), pending("p", 0)))
    a, b = analyse(ours, cfg, {}), analyse(base, cfg, {})
    cmp_ = compare(ours, base, a, b)
    verdict = judgeable([arm("gpuaware", 1), arm("baseline", 0)], slo_s=600)
    line = headline(cfg, a, b, cmp_, verdict)
    assert line.startswith("NOT JUDGEABLE") and "too few pods decided" in line
    assert "vs baseline" not in line and "%" not in line  # no (reversed) result printed
    judged = headline(cfg, a, b, cmp_, judgeable([arm("gpuaware"), arm("baseline")], slo_s=600))
    assert "Allocation: gpuaware" in judged and "vs baseline" in judged


def test_the_report_page_says_not_judgeable_and_drops_empty_lines(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    a = analyse(_result("gpuaware", feed(RunLog(C), pending("p", 0))), cfg, {})
    b = analyse(_result("baseline", feed(RunLog(C), pending("p", 0))), cfg, {})
    for r in (a, b):
        r.pop("series")
        r["utilisation"] = {}
        r["lag"] = lag_figures([(0.0, 2.0)], [], 576.0)
    a["health"] = {"faults": [], "decisions_checked": 0, "gpus_with_a_state": 0, "decisions_on_quarantined_gpus": 0,
                   "decisions_in_flight_at_a_quarantine": 0, "transitions": {}, "alerts": {"list": []}}
    verdict = judgeable([arm("gpuaware", 0), arm("baseline", 0)], slo_s=600)
    report = {"summary": "s", **verdict.as_json(), "invariants": {"x": True},
              "outcomes": {"gpuaware allocates more than the baseline": None}, "runs": {"gpuaware": a, "baseline": b},
              "services": {}, "comparison": {}, "seconds": 1.0, "stack": {"n": Decimal("0E-20")}}
    write_html(tmp_path / "report.html", report, [])
    page = (tmp_path / "report.html").read_text()
    assert "Not judgeable" in page and "too few pods decided" in page
    assert "gpuaware allocates more than the baseline: not judged" in page
    assert "Transitions: ." not in page and "Transitions:" not in page
    assert "The services against the twin's clock" in page and "1,152" in page  # 2 s at 576x
    assert "0E-20" not in page


def test_charts_of_empty_or_one_point_series_say_no_data(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    a = analyse(_result("gpuaware", RunLog(C)), cfg, {})
    b = analyse(_result("baseline", RunLog(C)), cfg, {})
    full = {label: {"t_h": [0.0], "allocated": [0.0], "occupied": [0.0], "fragmentation": [0.0]}
            for label in ("gpuaware", "baseline")}
    import matplotlib.pyplot as plt

    texts: list[str] = []
    real_savefig = plt.Figure.savefig

    def spy(fig: plt.Figure, *args: object, **kwargs: object) -> None:
        texts.extend(t.get_text() for ax in fig.axes for t in ax.texts)
        real_savefig(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt.Figure, "savefig", spy)
        write_plots(tmp_path, [a, b], full, 24.0)
    assert texts.count("no data") >= 4  # allocation, fragmentation, queue delay (two panels), fairness...

    panel = SimpleNamespace(title="demand", kind="timeseries")
    fig = _draw(plt, panel, ["time", "metric", "gpus"], [(1.7e9, "total", Decimal("13.600000000000000"))])
    shown = [t.get_text() for t in fig.axes[0].texts]
    assert shown == ["no data: one point per series (13.6)"] and not fig.axes[0].lines
    stat = _draw(plt, SimpleNamespace(title="nodes", kind="stat"), ["n"], [(Decimal("82.000"),)])
    assert [t.get_text() for t in stat.axes[0].texts] == ["82"]
    plt.close("all")


# --- numbers for people -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    (Decimal("0E-20"), "0"), (Decimal("13.600000000000000"), "13.6"), (82.0, "82"), (Decimal("82.000"), "82"),
    (0.077123, "0.07712"), (12345, "12,345"), (1234.5678, "1,235"), (-0.5, "-0.5"), (1e-12, "0"),
    (0.00001234, "0.00001234"), (None, "n/a"), (math.nan, "n/a"), (True, "yes"), ("KubeDefault", "KubeDefault"),
    (576.0, "576"), (2.5e9, "2,500,000,000"),
])
def test_numbers_read_as_people_write_them(value: object, text: str) -> None:
    assert human(value) == text


def test_plain_makes_report_json_strict() -> None:
    raw = {"a": Decimal("0E-20"), "b": [Decimal("13.6"), math.nan, (1, math.inf)], "c": {"d": Decimal("82.000")}}
    assert plain(raw) == {"a": 0, "b": [13.6, None, [1, None]], "c": {"d": 82}}
    json.dumps(plain(raw), allow_nan=False)
