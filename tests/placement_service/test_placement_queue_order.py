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
    with pytest.raises(SettingsError, match="_RESERVATIONS >= 0"):
        PlacementSettings(reservations=-1)
    assert PlacementSettings().reservations == 0  # none held unless asked for (see the setting)
