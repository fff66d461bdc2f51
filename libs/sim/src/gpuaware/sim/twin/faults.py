"""Faults for the twin's GPUs, as data: what a binder is told to inject (``GPUAWARE_BINDER_FAULTS``).

The simulated fleet already knows how a GPU degrades (``gpuaware.gpu.faults``: ECC growth, XID
bursts, thermal runaway, power caps), each a pure function of the twin's virtual time. This module
only names them in a form that crosses a process boundary: a JSON list of tagged objects, each
naming its GPU by node and index and its start in virtual seconds after the twin's start, so the
demo (or an operator) can plan faults before the binder exists and the binder injects exactly those.

Sample (an uncorrectable-error storm at 6 h, the GPU falling off the bus at 9 h)::

    [{"kind": "ecc", "node": "twin-a100-001", "gpu": 2, "at_s": 21600, "uncorrected_per_hour": 3,
      "corrected_per_hour": 150},
     {"kind": "xid", "node": "twin-h100-000", "gpu": 5, "at_s": 32400, "xid": 79, "count": 3}]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated

import msgspec
from msgspec import Meta

from gpuaware.gpu import EccErrorGrowth, Fault, PowerCap, ThermalRunaway, XidBurst

__all__ = ["EccSpec", "FaultSpec", "PowerCapSpec", "ThermalSpec", "XidSpec", "decode_faults", "encode_faults",
           "to_faults"]

NonNeg = Annotated[float, Meta(ge=0)]


class _Spec(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    node: str
    gpu: Annotated[int, Meta(ge=0)]
    """the GPU's index on its node"""
    at_s: NonNeg
    """virtual seconds after the twin's start"""


class EccSpec(_Spec, frozen=True, kw_only=True, tag="ecc"):
    """ECC errors growing linearly (uncorrected ones also remap rows or retire pages)."""

    corrected_per_hour: NonNeg = 0.0
    uncorrected_per_hour: NonNeg = 0.0


class XidSpec(_Spec, frozen=True, kw_only=True, tag="xid"):
    """``count`` XIDs ``interval_s`` apart (79: fallen off the bus)."""

    xid: Annotated[int, Meta(ge=1)] = 79
    count: Annotated[int, Meta(ge=1)] = 3
    interval_s: NonNeg = 1.0


class ThermalSpec(_Spec, frozen=True, kw_only=True, tag="thermal"):
    """Temperature climbing ``degrees_per_minute`` for ``duration_s`` (then the cooling recovers)."""

    degrees_per_minute: NonNeg = 3.0
    duration_s: NonNeg | None = None


class PowerCapSpec(_Spec, frozen=True, kw_only=True, tag="power_cap"):
    """The enforced power limit dropping to ``cap_w`` for ``duration_s``."""

    cap_w: NonNeg
    duration_s: NonNeg | None = None


FaultSpec = EccSpec | XidSpec | ThermalSpec | PowerCapSpec
_DECODER = msgspec.json.Decoder(list[FaultSpec])


def decode_faults(text: str) -> list[FaultSpec]:
    """Parse the JSON list (empty text: none); raises ``msgspec.ValidationError`` naming what is wrong."""
    return _DECODER.decode(text) if text.strip() else []


def encode_faults(specs: Iterable[FaultSpec]) -> str:
    return msgspec.json.encode(list(specs)).decode()


def to_faults(specs: Sequence[FaultSpec], start: float) -> list[Fault]:
    """The fleet's faults, at virtual ``start + at_s``."""
    out: list[Fault] = []
    for s in specs:
        ref, at = (s.node, s.gpu), start + s.at_s
        if isinstance(s, EccSpec):
            out.append(EccErrorGrowth(ref, at, corrected_per_hour=s.corrected_per_hour,
                                      uncorrected_per_hour=s.uncorrected_per_hour))
        elif isinstance(s, XidSpec):
            out.append(XidBurst(ref, at, xid=s.xid, count=s.count, interval_s=s.interval_s))
        elif isinstance(s, ThermalSpec):
            out.append(ThermalRunaway(ref, at, degrees_per_minute=s.degrees_per_minute, duration_s=s.duration_s))
        else:
            out.append(PowerCap(ref, at, cap_w=s.cap_w, duration_s=s.duration_s))
    return out
