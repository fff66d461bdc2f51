"""What NVML answers on this node, per metric of the sample contract: why a column the NVML backend
leaves empty (``None``) is empty on a given board.

``NvmlBackend`` turns "not available here" into ``None`` and moves on (``nvml.py``), which is right for the
agent but says nothing about *why*. ``make gpu-check`` needs the why for every metric the agent did not
publish on a real board: "``nvmlDeviceGetRetiredPages`` -> ``NVMLError_NotSupported``" (an H100 remaps rows
instead of retiring pages) is an explanation, a silent gap is a bug. So each column of
``gpuaware.schemas.METRIC_COLUMNS`` is mapped here to the NVML query the backend reads it with (the same
function and arguments), and ``nvml_answers`` asks each query once for one GPU and returns ``ok`` or the
error class NVML raised. Columns that NVML cannot give at all are in ``NOT_FROM_NVML`` with the reason.

Read-only by construction: every query is an ``nvmlDeviceGet*`` call; nothing here sets a clock, a power
limit, an ECC or MIG mode. A test checks that the two tables cover the contract's columns exactly, so a
new metric cannot go unexplained.

    answers = nvml_answers(0)      # {"retired_pages": "NVMLError_NotSupported", "util_pct": "ok", ...}
"""

from __future__ import annotations

import contextlib
from typing import Any

import pynvml

from gpuaware.gpu.errors import GpuBackendUnavailable

__all__ = ["NOT_FROM_NVML", "NVML_QUERIES", "nvml_answers"]

NVML_QUERIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "util_pct": ("nvmlDeviceGetUtilizationRates", ()),
    "mem_util_pct": ("nvmlDeviceGetUtilizationRates", ()),
    "mem_used_mib": ("nvmlDeviceGetMemoryInfo", ()),
    "mem_total_mib": ("nvmlDeviceGetMemoryInfo", ()),
    "temperature_c": ("nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",)),
    "mem_temperature_c": ("nvmlDeviceGetFieldValues", ("NVML_FI_DEV_MEMORY_TEMP",)),
    "power_w": ("nvmlDeviceGetPowerUsage", ()),
    "power_limit_w": ("nvmlDeviceGetEnforcedPowerLimit", ()),
    "sm_clock_mhz": ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",)),
    "mem_clock_mhz": ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",)),
    "throttle_reasons": ("nvmlDeviceGetCurrentClocksEventReasons", ()),
    "ecc_corrected_volatile": ("nvmlDeviceGetTotalEccErrors",
                               ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC")),
    "ecc_uncorrected_volatile": ("nvmlDeviceGetTotalEccErrors",
                                 ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC")),
    "ecc_corrected_aggregate": ("nvmlDeviceGetTotalEccErrors",
                                ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC")),
    "ecc_uncorrected_aggregate": ("nvmlDeviceGetTotalEccErrors",
                                  ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC")),
    "retired_pages": ("nvmlDeviceGetRetiredPages", ("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",)),
    "remapped_rows_correctable": ("nvmlDeviceGetRemappedRows", ()),
    "remapped_rows_uncorrectable": ("nvmlDeviceGetRemappedRows", ()),
    "row_remap_pending": ("nvmlDeviceGetRemappedRows", ()),
    "xid_last": ("nvmlDeviceGetSupportedEventTypes", ()),
    "pcie_replay": ("nvmlDeviceGetPcieReplayCounter", ()),
    "nvlink_up": ("nvmlDeviceGetNvLinkState", ("0",)),
}
"""column -> (the NVML query the backend reads it with, its arguments after the device handle: pynvml
constant names, or a literal integer); ``nvlink_up`` asks link 0 (a board without NVLink refuses it)"""

NOT_FROM_NVML: dict[str, str] = {
    "tensor_active_pct": "a DCGM profiling metric (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE): NVML has no such counter; "
                         "the telemetry agent's dcgm backend reads it from a dcgm-exporter",
}
"""columns no NVML query gives -> why"""


def _argument(name: str) -> Any:
    return int(name) if name.isdigit() else getattr(pynvml, name)


def _ask(handle: Any, function: str, args: tuple[str, ...]) -> str:
    """``ok``, or the name of the NVML error the query raised (``NVMLError_NotSupported``, ...)."""
    fn = getattr(pynvml, function, None)
    if fn is None:
        return f"{function} is not in this nvidia-ml-py"
    try:
        if function == "nvmlDeviceGetFieldValues":
            values = fn(handle, [_argument(a) for a in args])
            code = int(values[0].nvmlReturn)
            return "ok" if code == pynvml.NVML_SUCCESS else type(pynvml.NVMLError(code)).__name__
        fn(handle, *(_argument(a) for a in args))
    except pynvml.NVMLError as exc:
        return type(exc).__name__
    return "ok"


def nvml_answers(index: int) -> dict[str, str]:
    """For the GPU at NVML index ``index``: each NVML-read column -> ``ok`` or the error NVML raised.
    ``GpuBackendUnavailable`` when NVML cannot be opened or has no such GPU."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise GpuBackendUnavailable(f"NVML is not available: nvmlInit() failed with {type(exc).__name__}") from exc
    try:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            raise GpuBackendUnavailable(f"NVML has no GPU {index} ({type(exc).__name__})") from exc
        return {column: _ask(handle, function, args) for column, (function, args) in NVML_QUERIES.items()}
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
