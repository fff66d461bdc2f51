"""The placement service's fair-share settings: refused with the reason when out of range."""

from __future__ import annotations

import pytest

from gpuaware.runtime import SettingsError
from gpuaware.services.placement.settings import PlacementSettings


def test_the_service_refuses_an_unknown_order_and_out_of_range_knobs():
    assert PlacementSettings(queue_order="fair-share").queue_order == "fair-share"
    with pytest.raises(SettingsError, match="QUEUE_ORDER must be one of priority, fair-share"):
        PlacementSettings(queue_order="lottery")
    with pytest.raises(SettingsError, match="STARVED_BELOW"):
        PlacementSettings(starved_below=0.0)
    for bad in ({"reservations": -1}, {"turn_due": -0.1}, {"turn_lease_s": -1.0}):
        with pytest.raises(SettingsError, match="_RESERVATIONS, _TURN_DUE and _TURN_LEASE_S >= 0"):
            PlacementSettings(**bad)
    assert PlacementSettings().reservations == 0  # none held unless asked for (see the setting)
    assert PlacementSettings().turn_due == 0.1  # fair-share takes turns unless told not to (0)
    assert PlacementSettings(turn_due=0.0).turn_due == 0.0
