"""States with hysteresis: healthy -> degraded -> quarantined, and back only after a clean period.

Peers flip a GPU to unhealthy on one event and never bring it back; users of every one of them ask
for recovery. The machine here is small and explicit:

* Each observation yields *evidence levels*: ``hard`` (a driver's statement: uncorrectable error,
  fatal or hardware XID, pending/failed row remap) and ``soft`` (gauges and estimates: temperature,
  throttling, power, PCIe, NVLink, the failure risk). 0 = healthy, 1 = degraded, 2 = quarantined.
* Up: hard evidence raises the state at once. Soft evidence raises it only after holding on
  ``confirm_observations`` consecutive observations (per level), so one noisy sample never flips.
* Down: one level at a time. Quarantined -> degraded when nothing at quarantine level (soft evidence
  included, confirmed or not) was seen for ``quarantine_clean_s``; degraded -> healthy when nothing
  at degraded level was seen for ``degraded_clean_s``, counted from entering degraded at the
  earliest. Any evidence at a level restarts that level's clean clock.
* Bad input (late, duplicated, missing samples, counter resets, unknown XIDs, staleness) never
  reaches the machine: the tracker refuses or repairs it first (``gpuaware.health.inputs``).
* A manual override (cordon) pins the *effective* state with a reason; the automatic machine keeps
  running underneath, so an uncordon returns to what the evidence says (or, with ``clear``, to
  healthy with the history forgotten: the GPU was repaired or replaced). Every cordon and uncordon
  is recorded (``OverrideRecord``) for the audit.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from gpuaware.health.config import StateRules
from gpuaware.schemas import HealthState

__all__ = ["LEVEL", "STATES", "Machine", "Override", "OverrideRecord", "step"]

STATES = (HealthState.HEALTHY, HealthState.DEGRADED, HealthState.QUARANTINED)
"""level (0, 1, 2) -> state"""
LEVEL = {s: i for i, s in enumerate(STATES)}
"""state -> level"""


class Override(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An operator pinned the GPU's state (``gpuaware health cordon GPU --reason ...``)."""

    state: HealthState
    reason: str
    by: str
    at: float


class OverrideRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One cordon or uncordon, for the audit trail."""

    action: Literal["cordon", "uncordon"]
    reason: str
    by: str
    at: float
    previous: HealthState
    """the effective state before"""
    current: HealthState
    """the effective state after"""
    cleared: bool = False
    """uncordon with ``clear``: the automatic state and error history were reset"""


class Machine(msgspec.Struct, kw_only=True, gc=False):
    """The automatic state of one GPU and the clocks its hysteresis needs (persisted with the tracker)."""

    level: int = 0
    since: float | None = None
    """when the current level was entered"""
    last_degraded_evidence: float | None = None
    """last time any evidence (hard or soft, confirmed or not) was at degraded level or above"""
    last_quarantine_evidence: float | None = None
    streak_degraded: int = 0
    """consecutive observations with soft evidence at degraded level or above"""
    streak_quarantined: int = 0


def step(m: Machine, *, at: float, hard: int, soft: int, rules: StateRules) -> str:
    """Advance ``m`` by one observation; returns what happened: ``""``, ``"escalated"`` or ``"clean_period"``.

    ``hard`` and ``soft`` are evidence levels 0..2 (see the module docstring)."""
    m.streak_degraded = m.streak_degraded + 1 if soft >= 1 else 0
    m.streak_quarantined = m.streak_quarantined + 1 if soft >= 2 else 0
    confirmed = 2 if m.streak_quarantined >= rules.confirm_observations else (
        1 if m.streak_degraded >= rules.confirm_observations else 0)
    raw = max(hard, soft)
    if raw >= 1:
        m.last_degraded_evidence = at
    if raw >= 2:
        m.last_quarantine_evidence = at
    target = max(hard, confirmed)
    if m.since is None:
        m.since = at
    if target > m.level:
        m.level, m.since = target, at
        return "escalated"
    if m.level == 2:
        last = m.last_quarantine_evidence if m.last_quarantine_evidence is not None else m.since
        if at - last >= rules.quarantine_clean_s:
            m.level, m.since = 1, at
            return "clean_period"
    elif m.level == 1:
        seen = m.last_degraded_evidence
        last = m.since if seen is None else max(seen, m.since)
        if at - last >= rules.degraded_clean_s:
            m.level, m.since = 0, at
            return "clean_period"
    return ""
