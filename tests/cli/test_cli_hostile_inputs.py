"""Hostile inputs to the `gpuaware` command: each is refused on standard error with a non-zero exit
status and no traceback, before it can eat memory or leave half-written output behind."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpuaware.cli.main import app
from gpuaware.cli.options import atomic_file, atomic_folder
from gpuaware.sim import TraceError, load_nodes, synthetic_nodes, synthetic_pods, write_nodes, write_pods
from gpuaware.sim.hbm import HbmEvent, HbmFormatError, parse_hbm_csv, replay_all

runner = CliRunner()


def refused(result: Result, *, code: int = 2) -> str:
    """The result is a clean refusal: ``code``, the reason on standard error, no traceback anywhere."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    assert result.stderr.strip(), "the reason belongs on standard error"
    reason = " ".join(result.stderr.replace("│", " ").split())  # click's usage errors come boxed
    assert reason not in " ".join(result.stdout.split()), "the reason is not on standard output"
    return reason


# --- gpuaware health evaluate ---------------------------------------------------------------------------


@pytest.mark.parametrize(("time", "shown"), [("99999999999999999", "99999999999999999"), ("1e400", "1e400"),
                                             ("nan", "nan"), ("-3600", "-3600")])
def test_health_evaluate_refuses_a_time_outside_the_stated_range(tmp_path: Path, time: str, shown: str) -> None:
    """A time far in the future once stretched every server's hourly replay until memory ran out."""
    f = tmp_path / "hbm.csv"
    f.write_text(f"Server,Time,EccType\nA,{time},UER\n")
    out = tmp_path / "out"
    text = refused(runner.invoke(app, ["health", "evaluate", "--hbm-errors", str(f), "--out", str(out)]))
    assert "line 2" in text and shown in text and "1970 to 2100" in text
    assert not out.exists()


def test_health_evaluate_refuses_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "hbm.csv"
    f.write_bytes(b"Server,Time,EccType\nA\xff\xfe,1650690000,UER\n")
    text = refused(runner.invoke(app, ["health", "evaluate", "--hbm-errors", str(f), "--out", str(tmp_path / "o")]))
    assert "not UTF-8" in text


def test_hbm_times_are_checked_where_events_enter_the_replay() -> None:
    with pytest.raises(HbmFormatError, match="outside"):
        parse_hbm_csv(["Server,Time,EccType\n", "A,4102444801,CE\n"])
    with pytest.raises(HbmFormatError, match="outside"):
        replay_all([HbmEvent("A", 0.0, "CE"), HbmEvent("A", float("inf"), "UER")])


# --- gpuaware eval placement ----------------------------------------------------------------------------


@pytest.fixture
def small_trace(tmp_path: Path) -> tuple[Path, Path]:
    """Ten nodes and a hundred pods: seed 42's arrivals stop just short of 130 % of GPU capacity."""
    write_nodes(tmp_path / "nodes.csv", synthetic_nodes(10, seed=1))
    write_pods(tmp_path / "pods.csv", synthetic_pods(100, seed=2))
    return tmp_path / "nodes.csv", tmp_path / "pods.csv"


@pytest.mark.parametrize("gpus", ["99999999999999999999", "65"])
def test_eval_placement_refuses_a_node_with_more_gpus_than_a_node_holds(small_trace: tuple[Path, Path],
                                                                        tmp_path: Path, gpus: str) -> None:
    """A huge count overflowed numpy's int64; a billion allocated 7.45 GiB of GPU slots."""
    nodes, pods = small_trace
    lines = nodes.read_text().splitlines()
    first = lines[1].split(",")
    first[3] = gpus
    lines[1] = ",".join(first)
    nodes.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    text = refused(runner.invoke(app, ["eval", "placement", "--nodes", str(nodes), "--trace", str(pods),
                                       "--policies", "fgd", "--seeds", "42", "--jobs", "1", "--out", str(out)]))
    assert f"{nodes}:2: gpu='{gpus}' is above 64" in text
    assert not out.exists(), "a refused run leaves no output folder"


def test_trace_counts_are_bounded_before_anything_is_allocated(tmp_path: Path) -> None:
    f = tmp_path / "nodes.csv"
    f.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1024,1000000000,T4\n")
    with pytest.raises(TraceError, match="above 64"):
        load_nodes(f)
    f.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1e19,1024,1,T4\n")
    with pytest.raises(TraceError, match="cpu_milli='1e19' is above"):
        load_nodes(f)


def test_eval_placement_summary_is_strict_json_with_a_reason_for_each_null(small_trace: tuple[Path, Path],
                                                                           tmp_path: Path) -> None:
    """A level no seed reached was written as bare NaN, and numpy warned 'Mean of empty slice'."""
    nodes, pods = small_trace
    out = tmp_path / "out"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = runner.invoke(app, ["eval", "placement", "--nodes", str(nodes), "--trace", str(pods),
                                     "--policies", "fgd", "--seeds", "42", "--jobs", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    assert "Mean of empty slice" not in result.output

    def no_constants(name: str) -> None:
        raise AssertionError(f"summary.json holds {name}")

    summary = json.loads((out / "summary.json").read_text(), parse_constant=no_constants)
    fgd = summary["policies"]["FGD"]
    assert fgd["alloc_pct_at"]["130"] is None and fgd["unallocated_gpus_at"]["130"] is None
    assert "130 % of GPU capacity" in fgd["null_reasons"]["alloc_pct_at.130"]
    nulls = {f"{k}.{x}" for k in ("alloc_pct_at", "unallocated_gpus_at", "frag_ratio_pct_at")
             for x, v in fgd[k].items() if v is None}
    assert nulls == set(fgd["null_reasons"])


# --- gpuaware forecast evaluate -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helios_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four days of a Helios-format VC with a daily demand wave."""
    import numpy as np
    import pandas as pd

    t = pd.date_range("2020-05-01", periods=4 * 1440, freq="min")
    running = np.round(40 + 20 * np.sin(2 * np.pi * np.arange(len(t)) / 1440))
    frame = pd.DataFrame({"time": t.strftime("%Y-%m-%d %H:%M:%S"), "running_gpu_num": running,
                          "pending_gpu_num": 0})
    path = tmp_path_factory.mktemp("helios") / "vcTest_cluster_sequence_vc.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(("option", "value"), [("--test-days", "-1"), ("--test-days", "0"),
                                               ("--test-days", "nan"), ("--max-seconds", "-5")])
def test_forecast_evaluate_checks_its_bounds_before_any_work(helios_file: Path, tmp_path: Path, option: str,
                                                             value: str) -> None:
    """--test-days -1 was accepted and ran until training failed."""
    out = tmp_path / "out"
    args = ["forecast", "evaluate", "--series", str(helios_file), "--format", "helios", "--horizons", "10",
            "--iters", "5", "--max-seconds", "10", option, value, "--out", str(out)]
    text = refused(runner.invoke(app, args))
    assert option in text and "finite number in (0" in text
    assert not out.exists()


def test_forecast_evaluate_errors_go_to_stderr_and_leave_no_output_folder(helios_file: Path, tmp_path: Path) -> None:
    """The reason was printed on standard output, after the output folder had been made (and left empty)."""
    out = tmp_path / "out"
    text = refused(runner.invoke(app, ["forecast", "evaluate", "--series", str(helios_file), "--format", "helios",
                                       "--test-days", "1", "--horizons", "10", "--model", str(tmp_path / "no.onnx"),
                                       "--out", str(out)]))
    assert "model not found" in text
    assert not out.exists()


def test_a_failed_write_removes_the_output_folder_it_made(tmp_path: Path) -> None:
    """Outputs go to a temporary sibling renamed into place only when every write succeeded."""
    out = tmp_path / "deep" / "new"
    with pytest.raises(OSError), atomic_folder(out) as tmp:
        (tmp / "summary.json").write_text("{}")
        assert not out.exists(), "nothing is visible under the target while it is written"
        raise OSError("disk full")
    assert not (tmp_path / "deep").exists(), "neither the folder nor the parent made for it is left"
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "mine.txt").write_text("x")
    (kept / "summary.json").write_text("old")
    with pytest.raises(OSError), atomic_folder(kept) as tmp:
        (tmp / "summary.json").write_text("new")
        raise OSError("disk full")
    assert (kept / "summary.json").read_text() == "old" and (kept / "mine.txt").exists()
    with atomic_folder(kept) as tmp:
        (tmp / "summary.json").write_text("new")
    assert (kept / "summary.json").read_text() == "new" and (kept / "mine.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"], "no temporary folder is left"


def test_a_failed_file_write_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    target.write_bytes(b"old")
    with pytest.raises(OSError), atomic_file(target) as tmp:
        tmp.write_bytes(b"half")
        raise OSError("disk full")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


# --- gpuaware quota report ------------------------------------------------------------------------------

UNREACHABLE_DB = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"


@pytest.mark.parametrize("args", [["--since", "99999999999d"], ["--since", "9" * 400 + "d"],
                                  ["--until", "9999-12-31T23:59-12:00"], ["--since", "1969-12-31T00:00"]])
def test_quota_report_refuses_a_time_outside_1970_to_2100(tmp_path: Path, args: list[str]) -> None:
    text = refused(runner.invoke(app, ["quota", "report", *args, "--csv", str(tmp_path / "r.csv"),
                                       "--database-url", UNREACHABLE_DB]))
    assert "is not between 1970-01-01 and 2100-01-01" in text


def test_quota_report_refuses_a_csv_in_a_missing_folder_before_the_query(tmp_path: Path) -> None:
    text = refused(runner.invoke(app, ["quota", "report", "--csv", str(tmp_path / "nonexistent" / "x.csv"),
                                       "--database-url", UNREACHABLE_DB]))
    assert "cannot write the CSV" in text and "does not exist" in text


def test_quota_report_says_when_the_database_is_out_of_reach(tmp_path: Path) -> None:
    text = refused(runner.invoke(app, ["quota", "report", "--csv", str(tmp_path / "r.csv"),
                                       "--database-url", UNREACHABLE_DB]), code=3)
    assert "cannot read the chargeback intervals" in text and "127.0.0.1" in text
    assert not (tmp_path / "r.csv").exists()


# --- the one error policy (main.py's root handler, options.py) ------------------------------------------


def test_an_unexpected_error_is_one_line_on_stderr_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a command did not turn into a refusal itself: one line, exit 1, a hint at --debug."""
    import gpuaware.cli.quota as quota

    def boom(text: str, now: float) -> float:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(quota, "parse_when", boom)
    text = refused(runner.invoke(app, ["quota", "report", "--database-url", UNREACHABLE_DB]), code=1)
    assert "error: RuntimeError: boom second line" in text and "--debug shows the traceback" in text
    debug = runner.invoke(app, ["--debug", "quota", "report", "--database-url", UNREACHABLE_DB])
    assert debug.exit_code == 1 and "Traceback" in debug.stderr and "RuntimeError: boom" in debug.stderr


def test_an_unexpected_operating_system_error_exits_3_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuaware.cli.quota as quota

    def gone(given: str) -> str:
        raise PermissionError(13, "Permission denied", "/var/run/stack.json")

    monkeypatch.setattr(quota, "_database_url", gone)
    text = refused(runner.invoke(app, ["quota", "report"]), code=3)
    assert "/var/run/stack.json: Permission denied" in text


@pytest.mark.parametrize(("option", "value", "why"), [
    ("--seeds", "0-99999999999", "not within 0..4294967295"),  # was expanded into a set of 10^11 seeds
    ("--seeds", "0-4999", "more than 1000 values"),
    ("--seeds", "7-3", "low-high"),
    ("--jobs", "0", "--jobs"), ("--jobs", "100000", "--jobs"),
    ("--max-pods", "0", "--max-pods"), ("--max-pods", "-5", "--max-pods")])
def test_eval_placement_bounds_seeds_jobs_and_max_pods_before_any_work(small_trace: tuple[Path, Path],
                                                                       tmp_path: Path, option: str, value: str,
                                                                       why: str) -> None:
    nodes, pods = small_trace
    out = tmp_path / "out"
    text = refused(runner.invoke(app, ["eval", "placement", "--nodes", str(nodes), "--trace", str(pods),
                                       "--policies", "fgd", option, value, "--out", str(out)]))
    assert why in text
    assert not out.exists()


@pytest.mark.parametrize(("value", "why"), [("99999999", "not within 1..10080"),
                                            (",".join(str(h) for h in range(1, 40)), "more than 32 values"),
                                            ("0", "not within 1..10080"), ("ten", "must look like")])
def test_forecast_horizons_are_bounded_in_value_and_count(helios_file: Path, tmp_path: Path, value: str,
                                                          why: str) -> None:
    out = tmp_path / "out"
    text = refused(runner.invoke(app, ["forecast", "evaluate", "--series", str(helios_file), "--format", "helios",
                                       "--horizons", value, "--out", str(out)]))
    assert "--horizons" in text and why in text
    assert not out.exists()


@pytest.mark.parametrize("value", ["99999999999", "-1", "1,6,8761"])
def test_health_evaluate_lead_hours_are_bounded(tmp_path: Path, value: str) -> None:
    f = tmp_path / "hbm.csv"
    f.write_text("Server,Time,EccType\nA,1650690000,UER\n")
    text = refused(runner.invoke(app, ["health", "evaluate", "--hbm-errors", str(f), "--out", str(tmp_path / "o"),
                                       "--lead-hours", value]))
    assert "--lead-hours" in text and "0..8760" in text


def test_an_output_path_that_can_never_be_written_is_refused_before_any_work(small_trace: tuple[Path, Path],
                                                                            tmp_path: Path) -> None:
    nodes, pods = small_trace
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    hbm = tmp_path / "hbm.csv"
    hbm.write_text("Server,Time,EccType\nA,1650690000,UER\n")
    cases = [
        ["eval", "placement", "--nodes", str(nodes), "--trace", str(pods), "--out", str(a_file)],
        ["eval", "placement", "--nodes", str(nodes), "--trace", str(pods), "--out", str(a_file / "sub")],
        ["health", "evaluate", "--hbm-errors", str(hbm), "--out", str(a_file / "sub" / "deeper")],
        ["forecast", "train", "--series", str(hbm), "--format", "helios", "--out", str(tmp_path)],
        ["quota", "report", "--csv", str(a_file / "r.csv"), "--database-url", UNREACHABLE_DB],
    ]
    for args in cases:
        text = refused(runner.invoke(app, args))
        assert "cannot be written" in text, (args, text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "hbm.csv", "nodes.csv", "pods.csv"]


def test_a_refused_run_leaves_an_existing_output_folder_as_it_was(small_trace: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    _, pods = small_trace
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("earlier")
    broken = tmp_path / "broken.csv"
    broken.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1024,nan,T4\n")
    refused(runner.invoke(app, ["eval", "placement", "--nodes", str(broken), "--trace", str(pods),
                                "--policies", "fgd", "--seeds", "42", "--jobs", "1", "--out", str(out)]))
    assert [p.name for p in out.iterdir()] == ["summary.json"] and (out / "summary.json").read_text() == "earlier"
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name]


def test_alerts_bridge_refuses_a_non_finite_resend_interval() -> None:
    """A float range lets nan through (every comparison with it is false): the bridge started with it."""
    text = refused(runner.invoke(app, ["alerts", "bridge", "--listen-port", "9", "--resend-s", "nan"]))
    assert "--resend-s must be a finite number in [1, 3600]" in text


def test_health_cordon_errors_go_to_stderr_with_the_underlying_reason() -> None:
    """They were printed on standard output, and a refused connection said nothing after the colon."""
    result = runner.invoke(app, ["health", "cordon", "GPU-1", "--reason", "fuzz", "--nats-url",
                                 "nats://127.0.0.1:1", "--timeout", "2"])
    text = refused(result, code=3)
    assert "cannot reach NATS at nats://127.0.0.1:1" in text
    assert "Connect call failed" in text or "ConnectionRefusedError" in text, text
    assert not result.stdout.strip()
    assert "--timeout" in refused(runner.invoke(app, ["health", "uncordon", "GPU-1", "--reason", "r",
                                                      "--timeout", "nan"]))


def test_strict_json_writes_null_and_a_reason_for_each_non_finite_number() -> None:
    from gpuaware.cli.options import strict_json

    def no_constants(name: str) -> None:
        raise AssertionError(f"emitted {name}")

    text = strict_json({"rmse_at": {"10": float("nan"), "30": 1.5}, "runs": [float("inf")],
                        "null_reasons": {"coverage_at.p90.10": "no test samples"}})
    doc = json.loads(text, parse_constant=no_constants)
    assert doc["rmse_at"] == {"10": None, "30": 1.5} and doc["runs"] == [None]
    assert doc["null_reasons"] == {"coverage_at.p90.10": "no test samples", "rmse_at.10": "not a finite number (nan)",
                                   "runs[0]": "not a finite number (inf)"}


def test_a_huge_seed_range_is_refused_before_it_is_expanded() -> None:
    """Memory follows the input's size: the range is checked against the bounds and the count first."""
    import typer

    from gpuaware.cli.options import int_list

    for text in ("0-4294967295", "0-99999999999999999999999", "1,2," + "9" * 5000):
        with pytest.raises(typer.BadParameter):
            int_list(text, name="--seeds", lo=0, hi=2**32 - 1, most=1000, ranges=True)
    assert int_list("42-44, 7,,42", name="--seeds", lo=0, hi=99, most=5, ranges=True) == [7, 42, 43, 44]


def test_outputs_renamed_into_place_keep_the_usual_modes(tmp_path: Path) -> None:
    """The temporary folder and file are owner-only when made; what is renamed into place is not."""
    import os

    mask = os.umask(0o022)
    try:
        with atomic_folder(tmp_path / "out") as tmp:
            (tmp / "summary.json").write_text("{}")
        with atomic_file(tmp_path / "model.onnx") as tmp:
            tmp.write_bytes(b"x")
    finally:
        os.umask(mask)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "model.onnx").stat().st_mode & 0o777 == 0o644
