"""What health scoring remembers about one GPU (``GpuTrack``) and what it says after each
observation (``Assessment``)."""

from __future__ import annotations

import msgspec

from gpuaware.health.inputs import InputCounters, InputIssue
from gpuaware.health.state import STATES, Machine, Override, OverrideRecord
from gpuaware.schemas import GpuScored, GpuStateChanged, HealthState

__all__ = ["COMPONENTS", "Assessment", "GpuTrack", "product"]

COMPONENTS = ("memory_errors", "row_remap", "xid", "thermal", "power", "pcie", "nvlink", "telemetry", "risk")
"""every component name an ``Assessment`` carries, in this order"""


class Assessment(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The verdict on one GPU after one observation (or a tick, a cordon, an uncordon)."""

    gpu_uuid: str
    node: str
    gpu_index: int
    at: float
    state: HealthState
    """the effective state (an override wins over the automatic one)"""
    target: HealthState
    """what the current evidence alone asks for (before hysteresis and overrides)"""
    score: float
    risk: float
    components: dict[str, float]
    reasons: tuple[str, ...]
    changed: bool = False
    """the effective state changed here (also true for the first assessment of a GPU)"""
    previous: HealthState | None = None
    """the effective state before, when ``changed`` (None for a GPU never seen before)"""
    cause: str = ""
    """why it changed: ``first``, ``escalated``, ``clean_period``, ``cordon``, ``uncordon``"""
    actions: tuple[str, ...] = ()
    """recovery actions the XID catalogue asks for (``RESET_GPU``, ``REBOOT_NODE``, ``CONTACT_SUPPORT``)"""
    override: Override | None = None
    issues: tuple[InputIssue, ...] = ()
    """bad input met by this observation (also counted in the GPU's ``InputCounters``)"""
    applied: bool = True
    """False: the observation was refused (late or duplicate) and the verdict is the previous one"""

    def to_scored(self, *, source: str, emitted_at: float, cluster: str = "default",
                  model_version: str = "rules-v1") -> GpuScored:
        """The contract's ``GpuScored`` (``node`` must be known: ``describe`` it or carry it in observations)."""
        return GpuScored(source=source, emitted_at=emitted_at, cluster=cluster, node=self.node,
                         gpu_uuid=self.gpu_uuid, gpu_index=self.gpu_index, score=self.score, state=self.state,
                         scored_at=self.at, reasons=self.reasons, components=dict(self.components),
                         model_version=model_version)  # fmt: skip

    def to_state_changed(self, *, source: str, emitted_at: float,
                         cluster: str = "default") -> GpuStateChanged | None:
        """The contract's ``GpuStateChanged``, or None when the state did not change."""
        if not self.changed:
            return None
        return GpuStateChanged(source=source, emitted_at=emitted_at, cluster=cluster, node=self.node,
                               gpu_uuid=self.gpu_uuid, gpu_index=self.gpu_index, current=self.state,
                               score=self.score, changed_at=self.at, previous=self.previous,
                               reasons=self.reasons)  # fmt: skip


class GpuTrack(msgspec.Struct, kw_only=True, gc=False):
    """Everything remembered about one GPU; a msgspec Struct so the service persists it as JSON."""

    gpu_uuid: str
    node: str = ""
    gpu_index: int = 0
    model: str | None = None
    slowdown_c: float | None = None
    first_at: float | None = None
    last_at: float | None = None
    counters: dict[str, int] = msgspec.field(default_factory=dict)
    """last value of each cumulative counter"""
    xid_last: int | None = None
    ce_fast: float = 0.0
    ce_slow: float = 0.0
    xid_sum: float = 0.0
    temp_fast: float | None = None
    temp_slow: float | None = None
    throttle_share: float = 0.0
    pcie_sum: float = 0.0
    nvlink_max: int = 0
    bursts: list[tuple[float, float]] = msgspec.field(default_factory=list)
    """(first, last) time of each burst of hard errors, oldest first"""
    recent_xids: list[tuple[float, int]] = msgspec.field(default_factory=list)
    lifetime_ue: int = 0
    lifetime_ce: int = 0
    remap_pending: bool = False
    remap_failed: bool = False
    retired_pages: int = 0
    machine: Machine = msgspec.field(default_factory=Machine)
    override: Override | None = None
    audit: list[OverrideRecord] = msgspec.field(default_factory=list)
    inputs: InputCounters = msgspec.field(default_factory=InputCounters)
    issues: list[InputIssue] = msgspec.field(default_factory=list)
    stale: bool = False
    # the last verdict, returned for refused observations and ticks
    last_state: HealthState | None = None
    last_target: int = 0
    last_score: float = 100.0
    last_risk: float = 0.0
    last_components: dict[str, float] = msgspec.field(default_factory=dict)
    last_reasons: tuple[str, ...] = ()
    last_actions: tuple[str, ...] = ()

    @property
    def state(self) -> HealthState:
        return self.override.state if self.override is not None else STATES[self.machine.level]


def product(components: dict[str, float]) -> float:
    """The score: the product of the components (each 0..100), on 0..100 with one decimal."""
    p = 1.0
    for v in components.values():
        p *= v / 100.0
    return round(100.0 * p, 1)
