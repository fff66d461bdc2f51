"""The XID catalogue table: class and recovery action of the documented codes; unknown codes are None."""

from __future__ import annotations

import pytest

from gpuaware.gpu import APPLICATION_XIDS
from gpuaware.health import XID_CATALOG, XidAction, XidClass, classify_xid

A, S, HW, F = XidClass.APPLICATION, XidClass.SYSTEM, XidClass.HARDWARE, XidClass.FATAL


@pytest.mark.parametrize("code, xid_class, action, degrades, quarantines", [
    (13, A, XidAction.RESTART_APP, False, False),     # graphics engine exception: the kernel's fault
    (31, A, XidAction.RESTART_APP, False, False),     # page fault: an illegal address
    (32, S, XidAction.RESTART_APP, False, False),     # corrupted push buffer: bus / system memory
    (43, A, XidAction.RESTART_APP, False, False),
    (45, A, XidAction.IGNORE, False, False),          # cleanup after an earlier error
    (48, HW, XidAction.RESET_GPU, True, True),        # double-bit ECC: reset before reuse
    (61, HW, XidAction.RESET_GPU, True, True),
    (62, F, XidAction.RESET_GPU, True, True),
    (63, HW, XidAction.IGNORE, True, False),          # remap recorded: degrade until the reset
    (64, F, XidAction.CONTACT_SUPPORT, True, True),   # remap failed: RMA
    (68, A, XidAction.RESTART_APP, False, False),
    (69, S, XidAction.RESTART_APP, False, False),
    (74, HW, XidAction.RESET_GPU, True, True),        # NVLink
    (79, F, XidAction.REBOOT_NODE, True, True),       # fallen off the bus
    (92, HW, XidAction.IGNORE, True, False),          # high single-bit rate
    (94, HW, XidAction.RESTART_APP, True, False),     # contained ECC error
    (95, F, XidAction.RESET_GPU, True, True),         # uncontained ECC error
    (119, F, XidAction.RESET_GPU, True, True),        # GSP timeout
    (120, F, XidAction.RESET_GPU, True, True),
])
def test_documented_xids(code, xid_class, action, degrades, quarantines) -> None:
    info = classify_xid(code)
    assert info is not None
    assert (info.xid_class, info.action, info.degrades, info.quarantines) == (xid_class, action, degrades, quarantines)
    assert info.reason == f"xid_{code}" and info.name


@pytest.mark.parametrize("code", [0, 1, 999, 100_000])
def test_unknown_codes(code) -> None:
    assert classify_xid(code) is None


def test_the_device_plugins_application_list_is_application_here() -> None:
    # k8s-device-plugin's ignore list (gpuaware.gpu.APPLICATION_XIDS) must never quarantine here either
    for code in APPLICATION_XIDS:
        assert XID_CATALOG[code].xid_class is A


def test_every_action_that_needs_the_gpu_back_quarantines() -> None:
    for info in XID_CATALOG.values():
        if info.xid_class >= HW and info.action in (XidAction.RESET_GPU, XidAction.REBOOT_NODE,
                                                     XidAction.CONTACT_SUPPORT):
            assert info.quarantines, info
