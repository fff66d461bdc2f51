"""Bad input, counted and explained: what the tracker refused or repaired, never a state change.

Telemetry arrives late, twice, with holes, with counters that went down after a driver reload, and
with XID codes nobody documented. None of these says anything about the GPU's health, so none may
flip a state; each is counted (``InputCounters``, which the service exposes as metrics) and the
last few are kept with a sentence saying what was done (``InputIssue``), for the logs and the audit.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

__all__ = ["InputCounters", "InputIssue", "IssueKind"]


class IssueKind(StrEnum):
    OUT_OF_ORDER = "out_of_order"
    """older than the last applied observation: ignored (its cumulative counters are superseded)"""
    DUPLICATE = "duplicate"
    """same time as the last applied observation: ignored"""
    GAP = "gap"
    """observations missing: rates are computed over the real elapsed time, the state is held"""
    COUNTER_RESET = "counter_reset"
    """a cumulative counter went down (driver reload, GPU reset): re-baselined, nothing counted"""
    UNKNOWN_XID = "unknown_xid"
    """an XID code the catalogue does not know: scored a little, never a state change"""
    STALE = "stale"
    """no observation for ``stale_after_s``: scored, the state is held"""


class InputIssue(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    kind: IssueKind
    at: float
    """the observation's time (or the tick's, for staleness)"""
    detail: str
    """what happened and what the tracker did about it"""


class InputCounters(msgspec.Struct, kw_only=True, gc=False):
    """Per GPU (and summed over the fleet with ``add``); plain integers a service can export."""

    observations: int = 0
    """observations applied"""
    out_of_order: int = 0
    duplicates: int = 0
    gaps: int = 0
    missing_s: float = 0.0
    """time covered by gaps, beyond the expected interval"""
    counter_resets: int = 0
    unknown_xids: int = 0
    unknown_xid_codes: dict[str, int] = msgspec.field(default_factory=dict)
    """code (as text, for JSON) -> occurrences"""
    stale_periods: int = 0

    def add(self, other: InputCounters) -> InputCounters:
        """Sum into self (fleet totals); returns self."""
        for name in ("observations", "out_of_order", "duplicates", "gaps", "missing_s", "counter_resets",
                     "unknown_xids", "stale_periods"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for code, n in other.unknown_xid_codes.items():
            self.unknown_xid_codes[code] = self.unknown_xid_codes.get(code, 0) + n
        return self

    def as_dict(self) -> dict[str, object]:
        return msgspec.to_builtins(self)
