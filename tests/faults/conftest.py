"""The fault suite's report: every scenario's invariants printed at the end of the run (also inside
`make test`, where test output is otherwise captured), so a pass shows what held, not only that
nothing failed."""

from __future__ import annotations

from typing import Any

import pytest

_RESULTS: list[Any] = []


@pytest.fixture
def drill_report() -> list[Any]:
    """Append a `DrillResult`; it is printed in the terminal summary."""
    return _RESULTS


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _RESULTS:
        return
    terminalreporter.section("fault suite: invariants per scenario")
    for r in _RESULTS:
        terminalreporter.write_line(f"{r.scenario}: {r.plan}")
        for name, ok in r.invariants.items():
            terminalreporter.write_line(f"  {'ok    ' if ok else 'FAILED'} {name}")
        f = r.figures
        tel = f.get("telemetry", {})
        terminalreporter.write_line(
            f"  pods {f['pods']['arrived']}, decisions {f['decisions']}, telemetry samples on the bus "
            f"{tel.get('on_bus')} / stored {tel.get('stored')}; next decision after each recovery (s): "
            f"{f['first_decision_after_recovery_s']}")
