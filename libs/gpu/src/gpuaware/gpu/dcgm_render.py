"""dcgm-exporter's ``/metrics`` text written from a node's inventory and frame: the inverse of the
scrape (``dcgm``), so the digital twin's simulated GPUs reach a real agent through the same scrape
production uses (the binder serves it). It writes what the exporter writes - ``# HELP``/``# TYPE`` per family,
the exporter's label layout, int64 fields as integers (the exporter's rounding: a utilisation of
42.6 % reads 43), double fields with ``%f`` - and only what the frame holds: a missing value is no
sample at all, as current exporters skip blanks. Columns with no DCGM field (``nvlink_up``) are not
written; retired pages, which the frame holds as one sum, go out as ``DCGM_FI_DEV_RETIRED_DBE``
(the parser adds SBE and DBE back together). MIG instances are not rendered: frames carry whole GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from gpuaware.gpu.dcgm import PodRef
from gpuaware.gpu.frame import GpuFrame
from gpuaware.schemas import NodeInventory

__all__ = ["RENDERED", "render_dcgm_metrics"]


#: what ``render_dcgm_metrics`` writes, in this order: family, Prometheus type, whether DCGM stores
#: it as a double (``%f``) rather than an int64 (``%d``), HELP text (dcgm-exporter's CSV wording),
#: frame column, scale from the column to the field (``FB_FREE`` is total - used)
RENDERED: tuple[tuple[str, str, bool, str, str, float], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", False, "SM clock frequency (in MHz).", "sm_clock_mhz", 1),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", False, "Memory clock frequency (in MHz).", "mem_clock_mhz", 1),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", False, "Memory temperature (in C).", "mem_temperature_c", 1),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", False, "GPU temperature (in C).", "temperature_c", 1),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", True, "Power draw (in W).", "power_w", 1),
    ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gauge", True,
     "Effective power limit that the driver enforces after taking into account all limiters (in W).",
     "power_limit_w", 1),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", False, "Total number of PCIe retries.", "pcie_replay", 1),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", False, "GPU utilization (in %).", "util_pct", 1),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", False, "Memory utilization (in %).", "mem_util_pct", 1),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", False, "Value of the last XID error encountered.", "xid_last", 1),
    ("DCGM_FI_DEV_FB_FREE", "gauge", False, "Framebuffer memory free (in MiB).", "mem_total_mib", 1),
    ("DCGM_FI_DEV_FB_USED", "gauge", False, "Framebuffer memory used (in MiB).", "mem_used_mib", 1),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", False, "Current clock event reasons.", "throttle_reasons", 1),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", False, "Total number of single-bit volatile ECC errors.",
     "ecc_corrected_volatile", 1),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", False, "Total number of double-bit volatile ECC errors.",
     "ecc_uncorrected_volatile", 1),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", False, "Total number of single-bit persistent ECC errors.",
     "ecc_corrected_aggregate", 1),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", False, "Total number of double-bit persistent ECC errors.",
     "ecc_uncorrected_aggregate", 1),
    ("DCGM_FI_DEV_RETIRED_DBE", "counter", False, "Total number of retired pages due to double-bit errors.",
     "retired_pages", 1),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", False,
     "Number of remapped rows for uncorrectable errors", "remapped_rows_uncorrectable", 1),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", False,
     "Number of remapped rows for correctable errors", "remapped_rows_correctable", 1),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", False, "Whether remapping of rows is pending", "row_remap_pending", 1),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", True, "Ratio of cycles the tensor (HMMA) pipe is active.",
     "tensor_active_pct", 0.01),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Sequence[tuple[str, str | None]]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs if v)


def render_dcgm_metrics(inventory: NodeInventory, frame: GpuFrame, *,
                        pods: Mapping[str, Sequence[PodRef]] | None = None) -> str:
    """A node's GPUs as dcgm-exporter's ``/metrics`` text (see the module docstring).

    ``inventory`` names the GPUs (index, PCI bus id, model) and the node (``Hostname``); ``frame``
    holds their values (a frame of several nodes is cut to ``inventory.node``). ``pods`` (GPU uuid
    -> pods on it) adds the Kubernetes mapper's ``container``/``namespace``/``pod`` labels: a GPU
    shared by several pods is written once per pod, as the exporter does. Raises ``ValueError`` when
    the frame holds a GPU the inventory does not name.
    """
    if len(frame.nodes) > 1:
        frame = frame.for_node(inventory.node)
    info = {g.uuid: g for g in inventory.gpus}
    series: list[list[str]] = []  # per frame row: its label sets (one per pod, at least one)
    for uuid, index in zip(frame.gpu_uuid, frame.gpu_index.tolist(), strict=True):
        g = info.get(uuid)
        if g is None:
            raise ValueError(f"GPU {uuid} of the frame is not in the inventory of {inventory.node}")
        base: list[tuple[str, str | None]] = [
            ("gpu", str(index)), ("UUID", uuid), ("pci_bus_id", g.pci_bus_id), ("device", f"nvidia{index}"),
            ("modelName", g.model), ("Hostname", inventory.node), ("DCGM_FI_DRIVER_VERSION", inventory.driver_version),
        ]
        refs = (pods or {}).get(uuid) or ()
        series.append([_labels([*base, ("container", r.container), ("namespace", r.namespace), ("pod", r.pod)])
                       for r in refs] or [_labels(base)])
    used = frame.column("mem_used_mib")
    free_ok = frame.present("mem_used_mib") & frame.present("mem_total_mib")
    lines: list[str] = []
    for family, kind, double, help_text, column, scale in RENDERED:
        present = frame.present(column)
        values = frame.column(column).astype(np.float64)
        if family == "DCGM_FI_DEV_FB_FREE":
            present = free_ok
            values = np.maximum(values - used, 0)
        if not present.any():
            continue
        lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
        for row in np.flatnonzero(present).tolist():
            v = float(values[row]) * scale
            text = f"{v:f}" if double else str(math.floor(v + 0.5))
            lines += [f"{family}{{{labels}}} {text}" for labels in series[row]]
    return "\n".join(lines) + "\n" if lines else ""
