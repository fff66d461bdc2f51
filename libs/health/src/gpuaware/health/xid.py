"""NVIDIA's XID catalogue, reduced to what health scoring acts on: a class and a recovery action.

Why a table and not "every XID is bad": peers mark a GPU unhealthy on any XID outside a short
ignore list and never bring it back (NVIDIA k8s-device-plugin #234, HAMi #2200), while NVIDIA's own
catalogue says most XIDs are the application's fault (13, 31, 43: restart the application, the GPU
is fine) and gives each hardware XID a recovery action (reset the GPU, reboot the node, call
support). Users ask for exactly that alignment (k8s-device-plugin #1974).

Classes (what the state machine does with one occurrence, see ``gpuaware.health.tracker``):

* ``APPLICATION``: the workload's fault; scored a little, never changes the state.
* ``SYSTEM``: driver, firmware or bus trouble that is not a hardware defect by itself; scored, and
  only a *frequency* of them degrades (through the failure risk).
* ``HARDWARE``: the GPU is at fault but keeps working (contained ECC error, high single-bit error
  rate, a row remapping pending): the GPU is degraded at once.
* ``FATAL``: the GPU cannot be trusted until its recovery action ran (fallen off the bus,
  uncontained ECC error, GSP timeout): quarantined at once.

A HARDWARE XID whose action is ``RESET_GPU`` or stronger is treated as FATAL for the state
(``XidInfo.quarantines``): the catalogue says the GPU must be reset before it is used again.

Codes not in the table are *unknown*: counted (``InputCounters.unknown_xids``), scored a little,
named in ``reasons`` as ``xid_unknown_<code>``, and never change the state by themselves.

Sources: NVIDIA "XID Errors" (docs.nvidia.com/deploy/xid-errors, the Ampere+ catalogue with its
resolution buckets RESTART_APP / RESET_GPU / RESTART_BM / CONTACT_SUPPORT), the dynamic page
retirement and row remapping guides (48, 63, 64, 92, 94, 95), and the device plugin's application
list (13, 31, 43, 45, 68, 109, the same as ``gpuaware.gpu.APPLICATION_XIDS``). The table is a
summary in our own words; where the catalogue's action depends on the context (63: a remap that
succeeded only needs a reset when convenient), the milder reading is taken and the tracker's
row-remap evidence decides the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum

__all__ = ["XID_CATALOG", "XidAction", "XidClass", "XidInfo", "classify_xid"]


class XidClass(IntEnum):
    """Ordered by how bad one occurrence is (a larger value is worse)."""

    APPLICATION = 0
    SYSTEM = 1
    HARDWARE = 2
    FATAL = 3


class XidAction(StrEnum):
    """The catalogue's immediate recovery action (resolution bucket)."""

    IGNORE = "IGNORE"
    """informational or a consequence of an earlier error: nothing to do"""
    RESTART_APP = "RESTART_APP"
    """the application (or its channel) was killed; restarting it is enough"""
    RESET_GPU = "RESET_GPU"
    """drain the GPU and reset it (nvidia-smi -r) before new work"""
    REBOOT_NODE = "REBOOT_NODE"
    """the GPU cannot be recovered in place: reboot the node (bare metal)"""
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    """hardware that needs investigation or replacement (RMA)"""


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    name: str
    """short description, after the catalogue's mnemonic"""
    xid_class: XidClass
    action: XidAction

    @property
    def quarantines(self) -> bool:
        """One occurrence makes the GPU unusable until its recovery action ran."""
        return self.xid_class is XidClass.FATAL or (
            self.xid_class is XidClass.HARDWARE
            and self.action in (XidAction.RESET_GPU, XidAction.REBOOT_NODE, XidAction.CONTACT_SUPPORT)
        )

    @property
    def degrades(self) -> bool:
        """One occurrence degrades the GPU at once (hardware at fault, still working)."""
        return self.xid_class >= XidClass.HARDWARE

    @property
    def reason(self) -> str:
        return f"xid_{self.code}"


_A, _S, _H, _F = XidClass.APPLICATION, XidClass.SYSTEM, XidClass.HARDWARE, XidClass.FATAL
_IGN, _APP, _RST, _RBT, _SUP = (XidAction.IGNORE, XidAction.RESTART_APP, XidAction.RESET_GPU,
                                XidAction.REBOOT_NODE, XidAction.CONTACT_SUPPORT)

# code, description, class, immediate action
_ROWS: tuple[tuple[int, str, XidClass, XidAction], ...] = (
    (8, "GPU stopped processing (channel idle timeout)", _S, _APP),
    (13, "graphics engine exception (illegal instruction, out-of-range access in a kernel)", _A, _APP),
    (31, "GPU memory page fault (the application's illegal address)", _A, _APP),
    (32, "invalid or corrupted push buffer stream (DMA from system memory, PCIe)", _S, _APP),
    (38, "driver firmware error", _S, _APP),
    (43, "GPU stopped processing: the channel was reset after an application fault", _A, _APP),
    (45, "preemptive cleanup after an earlier error (the application was stopped)", _A, _IGN),
    (48, "double-bit ECC error (uncorrectable memory error)", _H, _RST),
    (56, "display engine error", _S, _APP),
    (57, "error programming the video memory interface", _H, _RST),
    (58, "unstable video memory interface detected", _H, _RST),
    (61, "internal micro-controller breakpoint / warning (PMU)", _H, _RST),
    (62, "internal micro-controller halt", _F, _RST),
    (63, "ECC page retirement or row remapping recorded (reset to activate)", _H, _IGN),
    (64, "ECC page retirement or row remapping failed", _F, _SUP),
    (68, "video decoder (NVDEC) exception", _A, _APP),
    (69, "graphics engine class error", _S, _APP),
    (74, "NVLink error (link down or fatal link error)", _H, _RST),
    (79, "GPU has fallen off the bus", _F, _RBT),
    (92, "high single-bit ECC error rate", _H, _IGN),
    (94, "contained ECC error (the affected application was stopped)", _H, _APP),
    (95, "uncontained ECC error (every application on the GPU is affected)", _F, _RST),
    (109, "context switch timeout", _A, _APP),
    (119, "GSP RPC timeout", _F, _RST),
    (120, "GSP error", _F, _RST),
    (121, "C2C link corrected error", _S, _IGN),
    (140, "unrecovered ECC error", _F, _RST),
    (154, "GPU recovery action changed (the driver asks for a reset or reboot)", _F, _RST),
)

XID_CATALOG: dict[int, XidInfo] = {code: XidInfo(code, name, cls, action) for code, name, cls, action in _ROWS}
"""Documented XID code -> what it means for health. Never mutate it."""


def classify_xid(code: int) -> XidInfo | None:
    """The catalogue's entry for ``code``; None for a code the table does not know."""
    return XID_CATALOG.get(code)
