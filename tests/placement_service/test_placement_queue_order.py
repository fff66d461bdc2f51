"""The placement service's fair-share settings: refused with the reason when out of range."""

from __future__ import annotations

import json

import pytest

from gpuaware.runtime import SettingsError
from gpuaware.services.placement.settings import PlacementSettings


def test_the_service_refuses_an_unknown_order_and_out_of_range_knobs():
    assert PlacementSettings(queue_order="fair-share").queue_order == "fair-share"
    with pytest.raises(SettingsError, match="QUEUE_ORDER must be one of fair-share, priority"):
        PlacementSettings(queue_order="lottery")
    with pytest.raises(SettingsError, match="STARVED_BELOW"):
        PlacementSettings(starved_below=0.0)
    for bad in ({"reservations": -1}, {"turn_due": -0.1}, {"turn_lease_s": -1.0}):
        with pytest.raises(SettingsError, match="_RESERVATIONS, _TURN_DUE and _TURN_LEASE_S >= 0"):
            PlacementSettings(**bad)
    assert PlacementSettings().reservations == 0  # none held unless asked for (see the setting)
    assert PlacementSettings().turn_due == 0.1  # fair-share takes turns unless told not to (0)
    assert PlacementSettings(turn_due=0.0).turn_due == 0.0
    for bad in ({"victim_min_run_s": -1.0}, {"victim_max_requeues": -1}, {"resize_hold_s": -1.0}):
        with pytest.raises(SettingsError, match="_VICTIM_MAX_REQUEUES and _RESIZE_HOLD_S must be >= 0"):
            PlacementSettings(**bad)


def test_the_order_settings_become_the_profiles_queue_sort_unless_it_names_one():
    assert "queue_sort" not in PlacementSettings().policy_config  # none named: priority
    fair = PlacementSettings(queue_order="fair-share", starved_below=0.5, turn_due=0.0, duration_default_s=900.0)
    assert fair.policy_config["queue_sort"] == {"name": "fair-share", "args": {
        "starved_below": 0.5, "default_s": 900.0, "min_runtime_s": 600.0, "turn_due": 0.0, "turn_lease_s": 900.0}}
    own = {"score": [{"name": "bestfit", "weight": 1}], "queue_sort": {"name": "priority"}}
    assert PlacementSettings(queue_order="fair-share", profile=json.dumps(own)).policy_config == own
