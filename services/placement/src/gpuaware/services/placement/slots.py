"""Each node's GPUs by slot: the wire names a GPU by UUID (or NVML index), the engine by slot.

Inventories list a node's GPUs in slot order; decisions' slices, bindings and telemetry events name
them by UUID, with the NVML index as a fallback for a node not inventoried yet.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuaware.schemas import GpuInfo, GpuSlice

__all__ = ["GpuSlots"]


class GpuSlots:
    def __init__(self) -> None:
        self.gpus: dict[str, tuple[GpuInfo, ...]] = {}
        """each node's GPUs by slot, as inventoried"""
        self._slot: dict[tuple[str, str], int] = {}

    def set(self, node: str, gpus: tuple[GpuInfo, ...]) -> bool:
        """A node's GPUs as inventoried. True when they changed."""
        if self.gpus.get(node) == gpus:
            return False
        self.gpus[node] = gpus
        for slot, g in enumerate(gpus):
            self._slot[(node, g.uuid)] = slot
        return True

    def slot_of(self, node: str, uuid: str, index: int) -> int | None:
        """The slot of the GPU `uuid` on `node` (else of NVML `index`); None when unknown."""
        slot = self._slot.get((node, uuid))
        if slot is not None:
            return slot
        for s, g in enumerate(self.gpus.get(node, ())):
            if g.index == index:
                return s
        return None

    def of_slices(self, node: str, gpu_slices: Iterable[GpuSlice]) -> tuple[int, ...]:
        """The slots of `gpu_slices` on `node` (a node not inventoried yet: NVML index order)."""
        out = []
        for s in gpu_slices:
            slot = self.slot_of(node, s.gpu_uuid, s.gpu_index)
            out.append(s.gpu_index if slot is None else slot)
        return tuple(out)
