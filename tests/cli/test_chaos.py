"""Chaos plans (`gpuaware drill --scenario`, `gpuaware.cli.chaos`): what a step means, and every
malformed one refused with the reason before anything is killed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuaware.cli import chaos
from gpuaware.cli.chaos import SCENARIOS, ChaosError, ChaosRunner, ChaosStep, _Done, parse_chaos
from gpuaware.cli.main import app


def test_a_plan_is_steps_in_time_order_with_their_down_time() -> None:
    steps = parse_chaos("postgres@20+30, kill:binder@10, nats-node:2@15+12.5")
    assert steps == (ChaosStep(10.0, "kill", "binder", 1.0), ChaosStep(15.0, "nats-node", "2", 12.5),
                     ChaosStep(20.0, "postgres", "", 30.0))
    assert [s.label for s in steps] == ["kill:binder@10+1", "nats-node:2@15+12.5", "postgres@20+30"]


def test_scenario_names_stand_for_their_plans() -> None:
    services = parse_chaos("services")
    assert {s.target for s in services} == {"placement", "binder", "health-scoring", "quota", "telemetry-agent",
                                            "telemetry-collector", "recorder"}
    assert {s.kind for s in parse_chaos("stack")} == {"nats", "postgres"}
    assert max(s.down_s for s in parse_chaos("stack")) == 30.0  # PostgreSQL away for 30 s
    assert parse_chaos("cluster")[0].kind == "nats-node"
    ha = parse_chaos("ha")
    assert [s.target for s in ha if s.kind == "standby"] == ["health-scoring", "forecasting", "quota"]
    assert [s.target for s in ha if s.kind == "kill-leader"] == ["health-scoring", "forecasting", "quota"]
    assert set(SCENARIOS) == {"services", "stack", "cluster", "ha"}


class _Standby:
    def __init__(self, lives: bool = True) -> None:
        self.lives = lives

    def alive(self) -> bool:
        return self.lives


def _runner(answers: Any, standby: _Standby) -> ChaosRunner:
    return ChaosRunner((), find=lambda _s: None, answers=answers, standbys={"forecasting": standby})  # type: ignore[dict-item]  # a process stand-in: only alive() is asked


def test_a_leader_is_killed_only_once_its_standby_answers() -> None:
    asked: list[tuple[str, str]] = []

    async def answers(service: str, instance: str) -> bool:
        asked.append((service, instance))
        return len(asked) >= 3  # still starting for two asks

    done = _Done(ChaosStep(17.0, "kill-leader", "forecasting"))
    asyncio.run(_runner(answers, _Standby())._standby_answers(done))
    assert asked == [("forecasting", "forecasting-standby")] * 3
    assert done.standby_wait_s is not None and done.record(0.0)["standby_wait_s"] == done.standby_wait_s


def test_a_standby_that_died_is_not_waited_for() -> None:
    async def never(_service: str, _instance: str) -> bool:
        return False

    done = _Done(ChaosStep(17.0, "kill-leader", "forecasting"))
    asyncio.run(_runner(never, _Standby(lives=False))._standby_answers(done))
    assert done.standby_wait_s is not None and done.standby_wait_s < chaos.STANDBY_READY_S


@pytest.mark.parametrize(("plan", "says"), [
    ("", "empty chaos plan"),
    ("kill:binder", "no '@<seconds>'"),
    ("reboot@3", "unknown kind 'reboot'"),
    ("kill:scheduler@3", "kill needs a service"),
    ("kill@3", "kill needs a service"),
    ("nats-node@3", "needs the node's index"),
    ("postgres:main@3", "takes no target"),
    ("nats@soon", "is not a number"),
    ("nats@nan", "between 0 and"),
    ("nats@inf", "between 0 and"),
    ("nats@-1", "between 0 and"),
    ("nats@1+1e9", "the down time must be between"),
])
def test_malformed_steps_are_refused_with_the_reason(plan: str, says: str) -> None:
    with pytest.raises(ChaosError, match=says.replace("(", r"\(").replace(")", r"\)")):
        parse_chaos(plan)


def test_the_drill_refuses_a_bad_plan_and_somebody_elses_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    bad = CliRunner().invoke(app, ["drill", "--scenario", "kill:scheduler@3"])
    assert bad.exit_code == 2 and "kill needs a service" in bad.output
    monkeypatch.setenv("NATS_URL", "nats://10.0.0.1:4222")
    theirs = CliRunner().invoke(app, ["drill", "--scenario", "services"])
    assert theirs.exit_code == 2 and "runs only on its own stack" in theirs.output
