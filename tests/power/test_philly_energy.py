"""On the real Philly node sequence (../shared/data, GPUAWARE_SHARED_DATA), the published test range
(2017-12-01 .. 12-14, 2016 ten-minute steps): gpuaware's planner, driven by the served forecast's p90,
switches off more node-hours than CES driven by persistence with no more shortfall events; the oracle is
never short. Skips, saying where it looked, when the file is absent."""

from __future__ import annotations

import pytest

from gpuaware.power import (
    PHILLY_FILE,
    PHILLY_SPLIT,
    CesPolicy,
    Oracle,
    Planner,
    PlannerParams,
    load_node_series,
    persistence_outlook,
    replay,
    served_outlook,
)
from gpuaware.sim import shared_data_dir

PATH = shared_data_dir() / PHILLY_FILE
pytestmark = pytest.mark.skipif(not PATH.is_file(), reason=f"Philly node sequence not found at {PATH}: set "
                                "GPUAWARE_SHARED_DATA to the shared/data folder that holds philly-node-sequence/")


def test_the_planner_saves_more_than_ces_with_persistence_and_is_short_no_more_often() -> None:
    window = load_node_series(PATH).window(*PHILLY_SPLIT["test"])
    active, total = window.held()
    assert len(active) == 2016 and window.notes[-1].endswith("0 without a sample")
    params = PlannerParams(boot_delay_s=600.0)
    served = served_outlook(PATH, params.reach)
    assert served.start == window.start and served.point.shape == (2016, params.reach)
    ces = replay("ces+persistence", CesPolicy(persistence_outlook(active, 59).point), active, total, 600.0, 600.0)
    plan = replay("planner", Planner(served.upper, params), active, total, 600.0, 600.0)
    oracle = replay("oracle", Oracle(active, 600.0, 600.0), active, total, 600.0, 600.0)
    assert plan.off_node_hours > ces.off_node_hours, (plan.summary(), ces.summary())
    assert plan.shortfall_events <= ces.shortfall_events, (plan.summary(), ces.summary())
    assert oracle.shortfall_events == 0 and oracle.off_node_hours > plan.off_node_hours
