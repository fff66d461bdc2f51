"""Hostile inputs to the `gpuaware` command: each is refused on standard error with a non-zero exit
status and no traceback, before it can eat memory or leave half-written output behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gpuaware.cli.main import app
from gpuaware.sim.hbm import HbmEvent, HbmFormatError, parse_hbm_csv, replay_all

runner = CliRunner()


def refused(result: Result, *, code: int = 2) -> str:
    """The result is a clean refusal: ``code``, the reason on standard error, no traceback anywhere."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    assert result.stderr.strip(), "the reason belongs on standard error"
    assert not result.stdout.strip(), f"nothing on standard output: {result.stdout!r}"
    return " ".join(result.stderr.split())


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
