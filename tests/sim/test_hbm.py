"""`gpuaware health evaluate` on a small synthetic Calchas-format file (every figure worked out below)
and on the real public file when ../shared/data is present."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaware.cli.main import app
from gpuaware.sim.hbm import HbmEvent, HbmFormatError, parse_hbm_csv, ue_episodes

runner = CliRunner()
T = 3600 * 444_000  # an hour boundary; every time below is T + hours * 3600
HEADER = ["Datacenter", "Server", "Name", "Stack", "SID", "PcId", "BankGroup", "BankArray", "Col", "Row", "Time",
          "EccType"]

# server, hour, kind, rows
EVENTS = [
    ("B", 0, "CE", 1),      # the file's first event: server-hours count from here
    ("A", 10, "UER", 1),    # A's first UE episode
    ("B", 20, "CE", 30),    # a corrected-error storm on a quiet server, never followed by a UE
    ("C", 50, "UEO", 1),    # C's only episode
    ("A", 100, "UEO", 1),   # A again, 90 h later: a second episode
    ("A", 110, "UER", 1),   # 10 h after the previous UE: same episode
    ("D", 120, "CE", 30),   # a storm ...
    ("D", 122, "UER", 1),   # ... 2 h before D's first UE
    ("B", 200, "CE", 1),    # the file's last event
]


def write_csv(path: Path) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for server, hour, kind, rows in EVENTS:
            for i in range(rows):
                w.writerow(["DC1", server, "DSA1", "0x0", "0x0", "0x1", "0x2", "0x1", "0x54", hex(i), T + hour * 3600,
                            kind])
    return path


def test_ue_episodes() -> None:
    ev = [HbmEvent("A", 0, "UER"), HbmEvent("A", 23 * 3600, "UEO"), HbmEvent("A", 47 * 3600, "UER"),
          HbmEvent("A", 71 * 3600, "CE"), HbmEvent("B", 5, "CE")]
    # A: 0 starts an episode; 23 h later is the same one; 47 h is 24 h after the UE at 23 h -> a new one
    assert ue_episodes(ev) == {"A": [0, 47 * 3600]}


@pytest.mark.parametrize("text, line, message", [
    ("", None, "empty file"),
    ("Server,Time\n", 1, "missing column"),
    ("Server,Time,EccType\nA,12,XX\n", 2, "none of CE, UER, UEO"),
    ("Server,Time,EccType\nA,noon,CE\n", 2, "cannot read"),
])
def test_format_errors(text: str, line: int | None, message: str) -> None:
    with pytest.raises(HbmFormatError, match=message) as info:
        parse_hbm_csv(text.splitlines(keepends=True))
    assert info.value.line == line


def test_evaluate_cli_on_a_synthetic_file(tmp_path: Path) -> None:
    """The figures, worked out (default configuration, hourly replay):

    Episodes: A@10, A@100, C@50, D@122 -> 4 (A@110 is 10 h after A@100: same episode).
    A: quarantined from hour 10 (the risk of one burst stays >= 0.5 for 261 h) -> A@100 caught at 1, 6, 24 h.
    B: 30 CEs at hour 20 on a quiet server: S_f = 30 * 6 * (1 - e^(-1/6)) = 27.6, r_f = 4.6/h, a ~ 25
       -> 5e-5 * 4.6 * (1 + 0.5 ln 25) = 6.0e-4/h -> risk 1 - e^(-168 * 6.0e-4) = 9.6 % >= 5 % at hours
       20..23 (2.7e-4/h < 3.05e-4 at hour 24): confirmed at 21 -> degraded, healthy one clean day after
       hour 23, at 47: 26 degraded hours, one escalation, no UE after it.
    D: the same storm at 120 -> degraded at 121; UE at 122 -> quarantined: D@122 caught at 1 h (state at 121),
       not at 6 or 24 h.
    recall: 1 h: A@100, D@122 = 2/4; 6 h and 24 h: A@100 = 1/4. Never-recover: A@100 only = 1/4 each.
    escalations: A@10 H->Q, B@21 H->D, C@50 H->Q, D@121 H->D, D@122 D->Q = 5; followed by an episode between
       L hours and 7 days later: A@10 (A@100) at every lead, D@121 (D@122, 1 h later) at 1 h only
       -> precision 2/5 at 1 h, 1/5 at 6 and 24 h.
    quarantined hours to the last event (hour 200): A 190 + C 150 + D 78 = 418; degraded: B 26 + D 1 = 27.
    never-recover unhealthy hours: A 190 + C 150 + D 78 = 418.
    """
    src = write_csv(tmp_path / "hbm.csv")
    out = tmp_path / "out"
    result = runner.invoke(app, ["health", "evaluate", "--hbm-errors", str(src), "--lead-hours", "24,1,6",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary == {
        "servers": 4,
        "ue_episodes": 4,
        "lead_hours": {"1": {"recall": 0.5, "precision": 0.4}, "6": {"recall": 0.25, "precision": 0.2},
                       "24": {"recall": 0.25, "precision": 0.2}},
        "quarantined_server_hours": 418.0,
        "degraded_server_hours": 27.0,
        "baseline_any_ue_forever": {"recall_at": {"1": 0.25, "6": 0.25, "24": 0.25}, "unhealthy_server_hours": 418.0},
    }
    detail = json.loads((out / "detail.json").read_text())
    assert detail["escalations"] == 5 and detail["caught_first"] == {"1": 1, "6": 0, "24": 0}
    assert detail["config"]["risk"]["aftershock_k"] == 1.4
    with (out / "escalations.csv").open() as f:
        rows = [(r["server"], (int(r["time"]) - T) // 3600, r["from"], r["to"]) for r in csv.DictReader(f)]
    assert rows == [("A", 10, "healthy", "quarantined"), ("B", 21, "healthy", "degraded"),
                    ("C", 50, "healthy", "quarantined"), ("D", 121, "healthy", "degraded"),
                    ("D", 122, "degraded", "quarantined")]
    with (out / "episodes.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 4
    assert "recall" in result.output and "never-recover" in result.output


def test_evaluate_cli_refuses_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("Server,Time,EccType\nA,1,BOOM\n")
    result = runner.invoke(app, ["health", "evaluate", "--hbm-errors", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "BOOM" in result.output
    result = runner.invoke(app, ["health", "evaluate", "--hbm-errors", str(bad), "--lead-hours", "soon",
                                 "--out", str(tmp_path / "o")])
    assert result.exit_code == 2


def test_help_names_the_command() -> None:
    result = runner.invoke(app, ["health", "evaluate", "--help"])
    assert result.exit_code == 0
    assert "--hbm-errors" in result.output and "--lead-hours" in result.output and "--out" in result.output


@pytest.mark.slow
def test_real_calchas_file_meets_the_acceptance(shared_data: Path, tmp_path: Path) -> None:
    """The evaluation's acceptance on the public file: recall at 1/6/24 h at least the never-recover rule's,
    quarantined server-hours at most half of the hours that rule withholds."""
    src = shared_data / "gpu-faults" / "calchas-hbm" / "hbm_errors_public.csv"
    if not src.is_file():
        pytest.skip(f"{src} not found: the Calchas file is part of the shared data")
    result = runner.invoke(app, ["health", "evaluate", "--hbm-errors", str(src), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    s = json.loads((tmp_path / "summary.json").read_text())
    # PROVENANCE.md: 35 servers; 108 episodes (27 first ones, 81 recurrences) by the definition
    assert (s["servers"], s["ue_episodes"]) == (35, 108)
    base = s["baseline_any_ue_forever"]
    for lead in ("1", "6", "24"):
        assert s["lead_hours"][lead]["recall"] >= base["recall_at"][lead]
        assert 0 < s["lead_hours"][lead]["precision"] <= 1
    assert s["quarantined_server_hours"] <= 0.5 * base["unhealthy_server_hours"]
