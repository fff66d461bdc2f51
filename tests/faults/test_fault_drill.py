"""The fault suite (issue 16): a workload replayed through the real services on the real embedded
stack while, in turn, every service is SIGKILLed and started again, nats-server is killed and
restarted, PostgreSQL is stopped for 30 s, and one node of a 3-node NATS cluster (R3 streams) is
lost. After each, the invariants of `gpuaware.cli.drill` are checked over PostgreSQL, the bus and
the twin: no pending pod lost, none bound twice, no GPU slice over-allocated, no telemetry sample
lost or duplicated, every event in the database (printed at the end of the run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuaware.cli.chaos import SCENARIOS
from gpuaware.cli.drill import run_drill

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_a_replay_keeps_every_invariant_through(scenario: str, tmp_path: Path, drill_report: list[Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)  # the drill kills servers: always its own stack
    monkeypatch.delenv("DATABASE_URL", raising=False)
    result = await run_drill(scenario, data_dir=tmp_path / "stack", out=tmp_path / "out")
    drill_report.append(result)
    failed = [name for name, ok in result.invariants.items() if not ok]
    assert not failed, f"{failed}\n{json.dumps(result.json(), indent=1, default=str)[:6000]}"
    # each fault really happened: a process or server went down and came back
    assert [c["step"] for c in result.chaos] and all(c["down_at_s"] is not None for c in result.chaos)
    if scenario == "cluster":  # the streams really were replicated on the cluster's three nodes
        assert set(result.figures["stream_replicas"].values()) == {3}
