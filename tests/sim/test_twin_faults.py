"""Faults planned as data reach the twin's GPUs: the binder's GPUAWARE_BINDER_FAULTS becomes the
fleet's ECC growth, XID burst and thermal runaway at the planned virtual times."""

from __future__ import annotations

import msgspec
import pytest

from gpuaware.runtime import SettingsError
from gpuaware.services.binder.settings import BinderSettings
from gpuaware.services.binder.twin_world import build_twin
from gpuaware.sim.twin import EccSpec, ThermalSpec, XidSpec, decode_faults, encode_faults

START = 1_767_225_600.0


def test_faults_round_trip_and_reach_the_fleet_at_their_virtual_times() -> None:
    specs = [EccSpec(node="twin-a100-000", gpu=2, at_s=3600, uncorrected_per_hour=3, corrected_per_hour=120),
             XidSpec(node="twin-h100-000", gpu=5, at_s=7200, xid=79, count=3),
             ThermalSpec(node="twin-l4-000", gpu=1, at_s=10800, degrees_per_minute=1.0, duration_s=1800)]
    text = encode_faults(specs)
    assert decode_faults(text) == specs and decode_faults("") == []
    twin = build_twin(BinderSettings(twin_nodes="default", workload="none", faults=text), start=START)
    fleet = twin.fleet
    assert fleet is not None

    def value(column: str, node: str, gpu: int, at: float) -> float:
        frame = fleet.sample(START + at)
        row = list(frame.gpu_uuid).index(twin.node_gpus[node][gpu].uuid)
        return float(frame.columns[column][row])

    # two hours after its start the ECC storm has made 6 uncorrectable and 240 corrected errors
    assert value("ecc_uncorrected_aggregate", "twin-a100-000", 2, 3599) == 0
    assert value("ecc_uncorrected_aggregate", "twin-a100-000", 2, 3600 + 7200) == 6
    assert value("ecc_corrected_aggregate", "twin-a100-000", 2, 3600 + 7200) == 240
    assert value("xid_last", "twin-h100-000", 5, 7199) == 0 and value("xid_last", "twin-h100-000", 5, 7203) == 79
    # 30 virtual minutes at 1 degC a minute: 30 degC hotter, and back once the cooling recovers
    hot = value("temperature_c", "twin-l4-000", 1, 10800 + 1799) - value("temperature_c", "twin-l4-000", 1, 10799)
    assert 25 < hot < 35
    assert abs(value("temperature_c", "twin-l4-000", 1, 10800 + 1900)
               - value("temperature_c", "twin-l4-000", 1, 10799)) < 3


def test_the_binder_refuses_faults_it_cannot_read() -> None:
    with pytest.raises(SettingsError, match="GPUAWARE_BINDER_FAULTS"):
        BinderSettings(faults='[{"kind": "meteor", "node": "n", "gpu": 0, "at_s": 1}]')
    with pytest.raises(SettingsError, match="needs the simulated fleet"):
        BinderSettings(fleet=False, faults=encode_faults([XidSpec(node="n", gpu=0, at_s=1)]))
    with pytest.raises(msgspec.ValidationError):
        decode_faults('[{"kind": "xid", "node": "n", "gpu": -1, "at_s": 1}]')
