"""A pod as the ledger knows it: its phase in placement's life, and what it holds or waits for.

    QUEUED        pending, not tried yet            PARKED        no fit now (retried)
    HELD          its gang is incomplete            UNRESOLVABLE  can never fit this node set
    DECIDED       reserved by a decision            BOUND         the binder placed it
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuaware.placement.model import PodRequest

__all__ = ["HOLDING", "RETRIED", "WAITING", "Phase", "PodEntry"]


class Phase(StrEnum):
    QUEUED = "queued"
    PARKED = "parked"
    HELD = "held"
    UNRESOLVABLE = "unresolvable"
    DECIDED = "decided"
    BOUND = "bound"


WAITING = (Phase.PARKED, Phase.HELD, Phase.UNRESOLVABLE, Phase.QUEUED)
RETRIED = (Phase.PARKED, Phase.QUEUED)
"""the phases a retry pass tries again"""
HOLDING = (Phase.DECIDED, Phase.BOUND)


@dataclass(slots=True)
class PodEntry:
    uid: str
    attempt: int
    phase: Phase
    request: PodRequest | None
    since: float = 0.0
    """when the pod entered this phase (the caller's clock)"""
    decision_id: str = ""
    node: str = ""
    gpus: tuple[int, ...] = ()
    reason: str = ""
    payload: Any = None
    """the caller's own record of the pod (the wire message), carried along untouched"""
    seq: int = 0
    """arrival order, for FIFO among equals"""
    placed: bool = False
    """its reservation is in the cluster (False while its node is unknown to this view)"""
    gpu_mem: int = 0
    """GPU memory it holds on each of its GPUs, MiB (0: its compute share, `Cluster.gpu_memory_of`)"""
    evicting: str = ""
    """the decision whose plan evicts it (its reservation is released meanwhile)"""
