"""The fault suite's report: every scenario's invariants printed at the end of the run (also inside
`make test`, where test output is otherwise captured, and from pytest-xdist's workers: the lines travel
with each test's report as a user property, printed by tests/conftest.py, which the controller loads), so
a pass shows what held, not only that nothing failed."""

from __future__ import annotations

import json
from typing import Any

import pytest

REPORT_PROPERTY = "fault_suite_report"
"""the user property the lines travel in (tests/conftest.py's FAULT_REPORT_PROPERTY)"""


class DrillReport:
    """`drill_report.append(result)`: a `DrillResult`'s invariants and figures, as lines for the summary."""

    def __init__(self, node: pytest.Item) -> None:
        self.node = node

    def append(self, r: Any) -> None:
        lines = [f"{r.scenario}: {r.plan}"]
        lines += [f"  {'ok    ' if ok else 'FAILED'} {name}" for name, ok in r.invariants.items()]
        f = r.figures
        tel = f.get("telemetry", {})
        lines.append(f"  pods {f['pods']['arrived']}, decisions {f['decisions']}, telemetry samples on the bus "
                     f"{tel.get('on_bus')} / stored {tel.get('stored')}; next decision after each recovery (s): "
                     f"{f['first_decision_after_recovery_s']}")
        if "ha" in f:  # the leader changes: what each took and what the streams show of it
            waits = {c["step"]: c.get("standby_wait_s") for c in r.chaos if c["kind"] == "kill-leader"}
            lines.append(f"  leader takeovers (s): {f['ha']['takeover_s']}; the standby answered after (s): {waits}")
            lines += [f"  {service}: {json.dumps(f['ha'][service], default=str)}"
                      for service in ("health", "forecasting", "quota") if service in f["ha"]]
        self.node.user_properties.append((REPORT_PROPERTY, "\n".join(lines)))


@pytest.fixture
def drill_report(request: pytest.FixtureRequest) -> DrillReport:
    """Append a `DrillResult`; it is printed in the terminal summary."""
    return DrillReport(request.node)
