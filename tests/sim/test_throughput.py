"""Pollux's throughput model: the step-time arithmetic, gradient accumulation, the fit (on rows drawn
from known parameters, and on Pollux's measurements when ../shared/data is present) and the loader's
errors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gpuaware.sim import (
    StepTimeParams,
    ThroughputMeasurement,
    ThroughputModel,
    TraceError,
    fit_quality_table,
    fit_throughput_model,
    iterations_to_target,
    load_throughput_models,
    packed_placement,
    read_measurements,
    shared_data_dir,
)

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
# gamma = 1: no overlap, so a step is compute + sync and the cases below are sums.
PLAIN = StepTimeParams(alpha_c=0.1, beta_c=0.01, alpha_r=0.05, beta_r=0.01, alpha_n=0.2, beta_n=0.02, gamma=1.0)


def plain(max_local_batch: int = 100) -> ThroughputModel:
    return ThroughputModel("plain", PLAIN, max_local_batch)


@pytest.mark.parametrize(("placement", "global_batch", "expected"), [
    # one GPU, no sync: 0.1 + 0.01 * 50
    ((1,), 50, 0.6),
    # two replicas on one node, local 25: 0.1 + 0.25 + 0.05
    ((2,), 50, 0.4),
    # four on one node, local ceil(50/4) = 13: 0.1 + 0.13 + 0.05 + 0.01 * 2
    ((4,), 50, 0.3),
    # the same four over two nodes: 0.1 + 0.13 + 0.2 + 0.02 * 2
    ((2, 2), 50, 0.47),
    # empty nodes do not count, nor does the order: one node, local 25
    ((0, 2, 0), 50, 0.4),
    # local 250 > 100: 3 passes of 84, two without sync: 2 * 0.94 + 0.94 (one GPU)
    ((1,), 250, 2.82),
    # local 200 on each of 2 replicas: 2 passes of 100: 1.1 + (1.1 + 0.05)
    ((2,), 400, 2.25),
])
def test_iteration_time_is_the_formula(placement: tuple[int, ...], global_batch: int, expected: float) -> None:
    assert plain().iteration_s(placement, global_batch) == pytest.approx(expected)
    assert plain().throughput(placement, global_batch) == pytest.approx(global_batch / expected)


def test_overlap_shortens_a_step_to_the_gamma_norm() -> None:
    model = ThroughputModel("overlap", StepTimeParams(0.3, 0.0, 0.4, 0.0, 0.4, 0.0, 2.0), 10)
    # sqrt(0.3^2 + 0.4^2)
    assert model.iteration_s((2,), 2) == pytest.approx(0.5)


def test_accumulation_amortises_the_sync() -> None:
    model = plain(max_local_batch=100)
    at_max = model.throughput((2, 2), 400)
    assert model.throughput((2, 2), 800) > at_max  # 2 passes, one sync
    assert model.throughput((2, 2), 4000) > model.throughput((2, 2), 800)
    # and never beyond the compute-only rate of 4 replicas at 100 samples per pass
    assert model.throughput((2, 2), 40_000) < 4 * 100 / model.grad_s(100)


def test_speedup_is_relative_to_the_reference() -> None:
    model = plain()
    assert model.speedup((2,), 50) == pytest.approx(0.6 / 0.4)
    assert model.speedup((2,), 50, reference=(2, 2)) == pytest.approx(0.47 / 0.4)


@pytest.mark.parametrize(("gpus", "per_node", "expected"), [
    (0, 4, ()),
    (3, 4, (3,)),
    (4, 4, (4,)),
    (10, 4, (4, 4, 2)),
    (9, 8, (8, 1)),
])
def test_packed_placement_fills_nodes_in_order(gpus: int, per_node: int, expected: tuple[int, ...]) -> None:
    assert packed_placement(gpus, per_node) == expected


@pytest.mark.parametrize(("placement", "global_batch"), [((), 8), ((0, 0), 8), ((2, -1), 8), ((1.5,), 8),
                                                         ((1,), 0)])
def test_a_meaningless_layout_or_batch_is_refused(placement: tuple[Any, ...], global_batch: int) -> None:
    with pytest.raises(ValueError):
        plain().iteration_s(placement, global_batch)


def test_packed_placement_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        packed_placement(-1, 4)
    with pytest.raises(ValueError):
        packed_placement(4, 0)


def synthetic_rows(truth: ThroughputModel) -> list[ThroughputMeasurement]:
    rows = []
    for placement in ("1", "2", "3", "4", "11", "22", "44", "112", "1111", "4444", "2222"):
        nodes, replicas = len(placement), sum(int(c) for c in placement)
        for batch in (8, 16, 32, 64, 128):
            step = truth.step_s(nodes, replicas, batch)
            sync = step - truth.grad_s(batch)
            rows.append(ThroughputMeasurement("placements", nodes, replicas, batch, step, sync))
    return rows


def test_the_fit_recovers_the_curve_that_drew_the_rows() -> None:
    truth = ThroughputModel("truth", StepTimeParams(0.05, 0.002, 0.03, 0.004, 0.12, 0.006, 2.0), 128)
    fitted = fit_throughput_model("truth", synthetic_rows(truth))
    assert fitted.max_local_batch == 128
    assert fitted.quality is not None and fitted.quality.placements_median < 0.01
    assert fitted.quality.scalability_rows == 0 and math.isnan(fitted.quality.scalability_median)
    for placement in ((1,), (3,), (4, 4, 4), (2, 1), (8,)):
        for batch in (16, 100, 1000):
            assert fitted.iteration_s(placement, batch) == pytest.approx(truth.iteration_s(placement, batch),
                                                                         rel=0.02)


def test_the_fit_keeps_cross_node_sync_at_least_the_one_node_sync() -> None:
    """Rows where crossing nodes looks cheaper (noise) still fit a model where it is not."""
    truth = ThroughputModel("truth", StepTimeParams(0.05, 0.002, 0.10, 0.004, 0.04, 0.001, 1.0), 128)
    fitted = fit_throughput_model("truth", synthetic_rows(truth))
    assert fitted.params.alpha_n >= fitted.params.alpha_r and fitted.params.beta_n >= fitted.params.beta_r
    assert all(v >= 0 for v in (fitted.params.alpha_c, fitted.params.beta_c, fitted.params.alpha_r,
                                fitted.params.beta_r)) and fitted.params.gamma >= 1


# ---- the loader -------------------------------------------------------------------------------------

GOOD_PLACEMENTS = "placement,local_bsz,step_time,sync_time\n1,8,0.2,0.001\n2,8,0.25,0.05\n11,8,0.4,0.2\n"
GOOD_SCALABILITY = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n6,6,8,0.6,0.4\n"


def app_dir(root: Path, placements: str = GOOD_PLACEMENTS, scalability: str | None = GOOD_SCALABILITY) -> Path:
    folder = root / "toy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "placements.csv").write_text(placements)
    if scalability is not None:
        (folder / "scalability.csv").write_text(scalability)
    return folder


def test_the_loader_reads_both_files(tmp_path: Path) -> None:
    rows = read_measurements(app_dir(tmp_path))
    assert [(r.source, r.num_nodes, r.replicas) for r in rows] == [
        ("placements", 1, 1), ("placements", 1, 2), ("placements", 2, 2), ("scalability", 6, 6)]
    models = load_throughput_models(tmp_path)
    assert list(models) == ["toy"] and models["toy"].max_local_batch == 8


@pytest.mark.parametrize(("placements", "where", "says"), [
    ("placement,local_bsz,step_time\n1,8,0.2\n", "placements.csv:1", "sync_time"),
    (GOOD_PLACEMENTS + "1a,8,0.2,0.001\n", "placements.csv:5", "digits"),
    (GOOD_PLACEMENTS + "10,8,0.2,0.001\n", "placements.csv:5", "digits"),
    (GOOD_PLACEMENTS + "1\u00b2,8,0.2,0.001\n", "placements.csv:5", "digits"),
    (GOOD_PLACEMENTS + "1,eight,0.2,0.001\n", "placements.csv:5", "local_bsz"),
    (GOOD_PLACEMENTS + "1,8,fast,0.001\n", "placements.csv:5", "step_time"),
    (GOOD_PLACEMENTS + "1,8,0.2,0.3\n", "placements.csv:5", "sync_time"),
    (GOOD_PLACEMENTS + "1,8,0.2\n", "placements.csv:5", "fields"),
    ("placement,local_bsz,step_time,sync_time\n", "placements.csv", "no measured rows"),
])
def test_a_malformed_placements_file_is_named_with_its_line(tmp_path: Path, placements: str, where: str,
                                                           says: str) -> None:
    app_dir(tmp_path, placements=placements)
    with pytest.raises(ValueError, match=says) as caught:
        load_throughput_models(tmp_path)
    assert isinstance(caught.value, TraceError) and where in str(caught.value)


def test_a_malformed_scalability_row_is_named_with_its_line(tmp_path: Path) -> None:
    app_dir(tmp_path, scalability=GOOD_SCALABILITY + "6,4,8,0.6,0.4\n")
    with pytest.raises(ValueError, match=r"scalability.csv:3: num_replicas=4 is fewer than num_nodes=6"):
        load_throughput_models(tmp_path)


def test_a_missing_file_or_folder_is_named(tmp_path: Path) -> None:
    app_dir(tmp_path, scalability=None)
    with pytest.raises(ValueError, match=r"toy/scalability.csv: file not found"):
        load_throughput_models(tmp_path)
    with pytest.raises(ValueError, match=r"bert/placements.csv: file not found"):
        load_throughput_models(tmp_path, apps=["bert"])
    with pytest.raises(ValueError, match="not a directory"):
        load_throughput_models(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no <app>/placements\.csv"):
        load_throughput_models(tmp_path / "empty")


# ---- Pollux's measurements --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pollux() -> dict[str, ThroughputModel]:
    traces = shared_data_dir() / "pollux" / "traces"
    if not traces.is_dir():
        pytest.skip(f"Pollux traces not found at {traces}: set GPUAWARE_SHARED_DATA to the shared/data folder")
    return load_throughput_models(traces, apps=APPS)


def test_every_application_fits_its_measurements(pollux: dict[str, ThroughputModel]) -> None:
    """The median error stays under 10 % on either file and the 90th percentile under 30 %."""
    assert sorted(pollux) == list(APPS)
    for app, model in pollux.items():
        q = model.quality
        assert q is not None and q.placements_rows > 500 and q.scalability_rows > 100, app
        assert q.placements_median < 0.10 and q.scalability_median < 0.10, (app, q)
        assert q.placements_p90 < 0.30 and q.scalability_p90 < 0.30, (app, q)
    table = fit_quality_table(pollux)
    assert all(f"| {app} |" in table for app in APPS)


@pytest.mark.parametrize(("app", "global_batch"), [("imagenet", 800), ("deepspeech2", 80), ("bert", 48)])
def test_more_gpus_on_one_node_run_a_compute_bound_job_faster(pollux: dict[str, ThroughputModel], app: str,
                                                              global_batch: int) -> None:
    rates = [pollux[app].throughput((k,), global_batch) for k in (1, 2, 3, 4)]
    assert rates == sorted(rates) and rates[-1] > 2 * rates[0], rates


def test_spreading_replicas_over_more_nodes_never_speeds_a_job_up(pollux: dict[str, ThroughputModel]) -> None:
    for app, model in pollux.items():
        for gpus in range(2, 17):
            for batch in (gpus, 8 * gpus, 64 * gpus, 1024 * gpus):
                times = [model.iteration_s(packed_placement(gpus, per_node), batch)
                         for per_node in (gpus, 8, 4, 2, 1)]
                assert times == sorted(times), (app, gpus, batch, times)


def test_a_layout_is_its_node_and_replica_count(pollux: dict[str, ThroughputModel]) -> None:
    model = pollux["cifar10"]
    assert model.iteration_s((4, 4, 1), 512) == model.iteration_s((1, 4, 4), 512)
    assert model.iteration_s((2, 2), 512) == model.iteration_s((3, 1), 512)


def test_a_batch_beyond_the_measured_local_batch_accumulates(pollux: dict[str, ThroughputModel]) -> None:
    model = pollux["imagenet"]
    assert model.max_local_batch == 200
    # local 1000 on one GPU: 5 passes of 200, the last one synchronised (nothing to sync on one GPU)
    assert model.iteration_s((1,), 1000) == pytest.approx(5 * model.grad_s(200))
    # local 401 on each of 4 GPUs: 3 passes of 134
    assert model.iteration_s((4,), 1604) == pytest.approx(2 * model.grad_s(134) + model.step_s(1, 4, 134))


def test_a_jobs_work_is_its_iterations_to_target_from_the_validation_trace(tmp_path) -> None:
    (tmp_path / "validation-64.csv").write_text("progress,iteration,metric\n10.0,5,0.5\n20.0,12,0.7\n")
    assert iterations_to_target(tmp_path, 64) == 12
    with pytest.raises(TraceError, match=r"no validation trace for batch 128 \(traced: \[64\]\)"):
        iterations_to_target(tmp_path, 128)
    (tmp_path / "validation-32.csv").write_text("progress,iteration\n10.0,five\n")
    with pytest.raises(TraceError, match="iteration='five' is not an integer"):
        iterations_to_target(tmp_path, 32)
