"""The demo's report of elastic jobs and the price of fairness: resizes read from the binder's events and
its resize handshakes, the victims' slowdown, the worst tenant's share of its fair share, in the JSON
figures, the summary line, the HTML page and the terminal table; and the --no-elastic switch reaching
the binder and the report's rebuilt workload alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import pytest
from test_demo_units import T0, C, _cfg, _result, bound, feed, finished, pending, preempted, slices

from gpuaware.cli.demo_analysis import analyse, compare, job_shapes, rebuild_workload
from gpuaware.cli.demo_config import RunSpec, service_env
from gpuaware.cli.demo_console import console, print_report
from gpuaware.cli.demo_record import RunLog
from gpuaware.cli.demo_report import price_of_fairness_rows, write_html, write_jobs_csv
from gpuaware.cli.demo_summary import price_of_fairness
from gpuaware.schemas import CheckpointRequested, PodPending
from gpuaware.sim import JobShape


def worker(uid: str, at: float, *, lo: int = 2, hi: int = 4, gang: str = "job") -> PodPending:
    return msgspec.structs.replace(pending(uid, at), gang_id=gang, gang_min_members=lo, gang_max_members=hi,
                                   expected_duration_s=100.0)


def resize(uid: str, at: float, world: int) -> CheckpointRequested:
    return CheckpointRequested(source="binder/t", emitted_at=T0 + at, cluster=C, request_id=f"{uid}-{at}",
                               pod_uid=uid, pod_name=uid, namespace="a", node="n1", reason="resize",
                               deadline_s=30.0, requested_at=T0 + at, world_size=world)


def elastic_run() -> RunLog:
    """An elastic job of 3 workers (min 2): two start at 10, the third joins at 20 (a grow), is taken back
    at 60 (a shrink; the binder asked the two others to resize to 2 first), and the job finishes at 160
    - without the shrink it would have kept 3 workers: 10 s at 2/3 speed, then the 100 s of work's other
    93.3 at full speed, done at 113.3; it took 160: a slowdown of 160 / 113.3. A lone pod in another
    queue runs throughout."""
    log = feed(RunLog(C), worker("w0", 0, hi=3), worker("w1", 0, hi=3), worker("w2", 0, hi=3),
               msgspec.structs.replace(pending("solo", 0, queue="b"), expected_duration_s=None),
               bound("solo", 0, slices(("g3", 1000))),
               bound("w0", 10, slices(("g0", 1000))), bound("w1", 10, slices(("g1", 1000))),
               bound("w2", 20, slices(("g2", 1000))), preempted("w2", 60),
               finished("w0", 160, 10), finished("w1", 160, 10))
    for uid in ("w0", "w1"):
        log.on_event(resize(uid, 20, 3), "binder.checkpoint.requested.v1")
        log.on_event(resize(uid, 59, 2), "binder.checkpoint.requested.v1")
    log.on_event(msgspec.structs.replace(resize("w0", 70, 2), reason="preemption"), "binder.checkpoint.requested.v1")
    return log


def test_gang_members_are_read_as_one_job_with_their_worker_range() -> None:
    log = feed(RunLog(C), worker("w0", 0), pending("solo", 0),
               msgspec.structs.replace(pending("g0", 0), gang_id="fixed", gang_min_members=2))
    assert job_shapes(log) == {"w0": JobShape("job", 2, 4), "g0": JobShape("fixed", 2, 2)}


def test_the_run_figures_carry_resizes_victims_and_the_worst_tenant(tmp_path: Path) -> None:
    log = elastic_run()
    assert len(log.resize_requests) == 4  # the preemption's checkpoint request is not a resize
    run = _result("gpuaware", log)
    fig = analyse(dataclasses.replace(run, gpus={f"g{i}": 0 for i in range(4)}), _cfg(tmp_path), {})
    v = fig["victims"]
    assert v["resizes"] == {"grows": 1, "shrinks": 1, "elastic_jobs": 1, "elastic_jobs_resized": 1,
                            "handshakes": 2}  # two instants, two workers asked each time
    assert (v["shrunk_jobs"], v["preempted_jobs"], v["preemptions_per_job_max"]) == (1, 0, 0)
    assert v["all"] == {"victims": 1, "finished": 1, "p50": 1.4118, "p95": 1.4118, "max": 1.4118}
    assert "first start" in v["slowdown_is"]
    # rho over 2 tenants on 4 GPUs (a slice of 2): the job (3 GPUs, 100 s) alone 100 x 3 / 2 = 150 s, took
    # 160; solo's work is unknown (it runs past the run), but its tenant counts
    assert fig["fairness"]["finish_time"] == {"tenants": 2, "jobs": 1, "unfinished": 0, "p50": 1.0667,
                                              "p95": 1.0667, "max": 1.0667}
    hourly = fig["fairness"]["hourly"]
    # 4 GPUs, a 200-s window: job wants 3 GPUs over [0, 160) and holds 2-3; solo 1 throughout: never more
    # than the cluster has, so no contended hour and no worst tenant
    assert hourly["contended_hours"] == 0 and hourly["worst_tenant"] is None and hourly["hours"] == 1


def test_the_jobs_csv_has_a_line_per_job_with_its_resizes_and_slowdown(tmp_path: Path) -> None:
    import csv

    write_jobs_csv(tmp_path / "jobs.csv", _result("gpuaware", elastic_run()), {}, 200.0)
    rows = {r["job"]: r for r in csv.DictReader((tmp_path / "jobs.csv").open())}
    assert rows.keys() == {"job", "solo"}
    job, solo = rows["job"], rows["solo"]
    assert (job["min_workers"], job["max_workers"], job["grows"], job["shrinks"], job["preemptions"]) == (
        "2", "3", "1", "1", "0")
    assert (job["first_start_s"], job["finished_s"], job["slowdown"]) == ("10.0", "160.0", "1.4118")
    assert (solo["max_workers"], solo["slowdown"], solo["finished_s"]) == ("1", "", "")


def test_a_contended_run_names_its_worst_tenant(tmp_path: Path) -> None:
    # 2 GPUs: queue a asks 2 one-GPU pods, queue b 2; a holds both, b waits: b gets nothing of its fair 1
    log = feed(RunLog(C), pending("a1", 0), pending("a2", 0), pending("b1", 0, queue="b"), pending("b2", 0, queue="b"),
               bound("a1", 0, slices(("g0", 1000))), bound("a2", 0, slices(("g1", 1000))))
    hourly = analyse(_result("gpuaware", log), _cfg(tmp_path), {})["fairness"]["hourly"]
    assert (hourly["worst_tenant"], hourly["worst_share_of_fair_share"], hourly["tenants"]) == ("b", 0.0, 2)
    assert hourly["jain_backlogged_contended_mean"] == pytest.approx(0.5) and hourly["contended_hours"] == 1


def test_summary_html_and_terminal_show_the_price_of_fairness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg(tmp_path)
    ours, base = _result("gpuaware", elastic_run()), _result("baseline", elastic_run())
    a, b = analyse(ours, cfg, {}), analyse(base, cfg, {})
    line = price_of_fairness(a, b)
    assert "Elastic resizes: gpuaware 1 grows / 1 shrinks" in line
    assert "Victims' slowdown p50 / p95: gpuaware 1.41 / 1.41 over 1 jobs" in line
    # on _result's 2 GPUs the hour is contended (3.4 GPUs wanted on average); both tenants get their fair 1
    assert "Worst tenant's share of its fair share: gpuaware 1.00 (a; Jain 1.00 over 2 tenants, 1 contended" in line
    rows = dict(price_of_fairness_rows(a))
    assert rows["elastic resizes: grows / shrinks"] == "1 / 1" and rows["victims' slowdown p50 / p95"] == "1.412 / 1.412"
    cmp_ = compare(ours, base, a, b)
    assert cmp_["victims_jct_over_baseline_jct"] == {"jobs": 1, "p50": 1.0, "p95": 1.0}  # the same run twice
    for r in (a, b):
        r.pop("series")
        r["utilisation"] = {}
    report = {"summary": line, "invariants": {}, "outcomes": {}, "runs": {"gpuaware": a, "baseline": b},
              "services": {}, "comparison": cmp_, "seconds": 1.0}
    write_html(tmp_path / "report.html", report, [])
    page = (tmp_path / "report.html").read_text()
    assert "<h3>Victims' slowdown per class</h3>" in page and "worst tenant&#x27;s share of its fair share" in page
    monkeypatch.setattr(console, "width", 300)  # the table's rows unwrapped
    with console.capture() as captured:
        print_report(report, a, b, [], cfg)
    assert "elastic resizes: grows / shrinks" in captured.get()


def test_no_elastic_reaches_the_binder_and_the_rebuilt_workload(tmp_path: Path) -> None:
    on = _cfg(tmp_path)
    off = dataclasses.replace(on, elastic=False, window_s=6 * 3600.0)
    on = dataclasses.replace(on, window_s=6 * 3600.0)
    spec = RunSpec("gpuaware", "P", "c")
    assert service_env(on, spec, "nats://x", "postgresql://x")["binder"]["GPUAWARE_BINDER_ELASTIC"] == "true"
    assert service_env(off, spec, "nats://x", "postgresql://x")["binder"]["GPUAWARE_BINDER_ELASTIC"] == "false"
    assert any(p.elastic for p in rebuild_workload(on).values())
    assert not any(p.elastic for p in rebuild_workload(off).values())
