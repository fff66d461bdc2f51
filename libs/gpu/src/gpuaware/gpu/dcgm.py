"""dcgm-exporter scrape backend: Prometheus text from ``:9400/metrics`` -> inventory, samples, events.

For clusters that already run NVIDIA's GPU operator, scraping its exporter costs nothing extra and
needs no NVML access from our pod. What the exporter's text really looks like shaped this module
(see ``../shared/k8s/telemetry.md``):

* Parsing is ``prometheus_client.parser.text_string_to_metric_families``, never a hand-written
  parser. Values are keyed by *family* name: the parser appends ``_total`` to the sample names of
  counter families (``DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total``) although the exporter does not.
* Family order is not stable between scrapes (a Go map), so everything is keyed by name and labels.
* ``Hostname`` (released exporters) and ``hostname`` (main since 2026-05-12) are both accepted, as
  are ``UUID``/``uuid`` and the old ``pod_name``/``pod_namespace``/``container_name`` labels.
* A GPU shared by several pods appears once per pod with identical values; the series collapse
  into one entity that remembers every pod (``DcgmEntity.pods``) for usage attribution.
* MIG: series carrying ``GPU_I_ID``/``GPU_I_PROFILE`` are GPU instances, kept apart in
  ``DcgmScrape.mig``. The physical GPU's row sums their framebuffer use and estimates utilisation as
  the slice-weighted graphics-engine activity, ``sum(active_i * g_i) / 7`` for ``<g>g.<mem>gb``
  profiles (A100/H100 have 7 compute slices), because ``DCGM_FI_DEV_GPU_UTIL`` is not available per
  instance.
* Unsupported values: current exporters skip them, older ones leaked DCGM blank sentinels
  (``9223372036854775794`` = ``DCGM_INT64_BLANK + 2`` = NOT_SUPPORTED). Values >= 9.2e18, NaN and
  infinities are dropped, and for the double-valued fields (power, profiling ratios) the FP64 blank
  range (>= 2^47) too; integer counters are left alone there since a byte counter can pass 2^47.
* ``DCGM_FI_DEV_XID_ERRORS`` is a *gauge holding the last XID*, not a count: a new XID is reported
  only when the value changes to a non-zero one between scrapes. The same XID twice in a row is
  invisible through this gauge (a limitation of the exporter, not of the parser); the first scrape
  is a baseline, its value lands in the ``xid_last`` column.

The inverse, a frame written as the exporter's text, is ``dcgm_render``.
"""

from __future__ import annotations

import math
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from gpuaware.gpu.backend import Clock, system_clock
from gpuaware.gpu.errors import GpuBackendError
from gpuaware.gpu.events import FrameWatch, GpuEvent
from gpuaware.gpu.frame import COLUMNS, GpuFrame
from gpuaware.gpu.models import find_model, mig_compute_slices
from gpuaware.schemas import GpuInfo, MigInstance, MigMode, NodeInventory

__all__ = [
    "DcgmEntity",
    "DcgmExporterBackend",
    "DcgmScrape",
    "PodRef",
    "parse_dcgm_metrics",
]

INT64_BLANK_FLOOR = 9.2e18
FP64_BLANK = float(2**47)  # DCGM_FP64_BLANK = 140737488355328.0
_DOUBLE_FIELDS = ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_")
_MIG_COMPUTE_SLICES = 7

#: dcgm family -> (metric column, scale)
COLUMN_OF: Mapping[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("util_pct", 1),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1),
    "DCGM_FI_DEV_FB_USED": ("mem_used_mib", 1),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1),
    "DCGM_FI_DEV_MEMORY_TEMP": ("mem_temperature_c", 1),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", 1),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("throttle_reasons", 1),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_corrected_volatile", 1),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_uncorrected_volatile", 1),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_corrected_aggregate", 1),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_uncorrected_aggregate", 1),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows_correctable", 1),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows_uncorrectable", 1),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("row_remap_pending", 1),
    "DCGM_FI_DEV_XID_ERRORS": ("xid_last", 1),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay", 1),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_pct", 100),
}


class PodRef(NamedTuple):
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class DcgmEntity:
    """One GPU (``gpu_instance_id`` None) or one MIG GPU instance, with every value it reported."""

    gpu_index: int
    uuid: str
    pci_bus_id: str | None
    device: str | None
    model: str | None
    gpu_instance_id: int | None
    gpu_instance_profile: str | None
    values: Mapping[str, float]
    """family name -> value, sentinels already dropped"""
    pods: tuple[PodRef, ...] = ()
    mig_uuid: str | None = None
    """from the DRA label ``dra_mig_device_uuid`` when present"""


@dataclass(frozen=True, slots=True)
class DcgmScrape:
    """Everything one scrape said, grouped by GPU."""

    hostname: str | None
    driver_version: str | None
    gpus: tuple[DcgmEntity, ...]
    """whole GPUs, by index"""
    mig: tuple[DcgmEntity, ...]
    """MIG GPU instances, by (GPU index, instance id)"""
    dropped: int = 0
    """sentinel / non-finite values discarded"""
    families: frozenset[str] = field(default_factory=frozenset)

    def physical(self) -> list[tuple[int, str, str | None, str | None]]:
        """(index, uuid, pci_bus_id, model) of every physical GPU seen, whole or through MIG."""
        seen: dict[str, tuple[int, str, str | None, str | None]] = {}
        for e in (*self.gpus, *self.mig):
            seen.setdefault(e.uuid, (e.gpu_index, e.uuid, e.pci_bus_id, e.model))
        return sorted(seen.values())

    def rows(self) -> list[dict[str, Any]]:
        """Per physical GPU: ``gpu_uuid``, ``gpu_index`` and the metric columns it reported."""
        whole = {e.uuid: e for e in self.gpus}
        children: dict[str, list[DcgmEntity]] = {}
        for e in self.mig:
            children.setdefault(e.uuid, []).append(e)
        out = []
        for index, uuid, _, _ in self.physical():
            row: dict[str, Any] = {"gpu_uuid": uuid, "gpu_index": index}
            if uuid in whole:
                row.update(_columns(whole[uuid].values))
            kids = children.get(uuid, [])
            if kids:
                _merge_mig(row, kids)
            out.append(row)
        return out


def _columns(values: Mapping[str, float]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for family, (column, scale) in COLUMN_OF.items():
        if family in values:
            row[column] = values[family] * scale
    if "util_pct" not in row and "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in values:
        row["util_pct"] = values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] * 100
    used, free = values.get("DCGM_FI_DEV_FB_USED"), values.get("DCGM_FI_DEV_FB_FREE")
    if used is not None and free is not None:
        row["mem_total_mib"] = used + free + values.get("DCGM_FI_DEV_FB_RESERVED", 0)
    retired = [values[f] for f in ("DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE") if f in values]
    if retired:
        row["retired_pages"] = sum(retired)
    return row


def _merge_mig(row: dict[str, Any], kids: list[DcgmEntity]) -> None:
    """Fill what the physical GPU did not report itself from its MIG instances."""
    used = [k.values["DCGM_FI_DEV_FB_USED"] for k in kids if "DCGM_FI_DEV_FB_USED" in k.values]
    if "mem_used_mib" not in row and used:
        row["mem_used_mib"] = sum(used)
    slices = [mig_compute_slices(k.gpu_instance_profile or "") for k in kids]
    sizes = [s for s in slices if s is not None]
    if len(sizes) < len(slices):
        return
    for column, family in (
        ("util_pct", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        ("tensor_active_pct", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    ):
        if column not in row and all(family in k.values for k in kids):
            busy = sum(k.values[family] * s for k, s in zip(kids, sizes, strict=True))
            row[column] = 100.0 * busy / _MIG_COMPUTE_SLICES


def _is_blank(family: str, value: float) -> bool:
    if not math.isfinite(value) or value >= INT64_BLANK_FLOOR:
        return True
    return family.startswith(_DOUBLE_FIELDS) and value >= FP64_BLANK


def _label(labels: Mapping[str, str], *names: str) -> str | None:
    for n in names:
        v = labels.get(n)
        if v:
            return v
    return None


def parse_dcgm_metrics(text: str) -> DcgmScrape:
    """Parse one dcgm-exporter ``/metrics`` body. Raises ``ValueError`` on text Prometheus rejects."""
    entities: dict[tuple[str, int | None], dict[str, Any]] = {}
    hostname = driver = None
    dropped = 0
    families: set[str] = set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for sample in family.samples:
            labels = sample.labels
            if "nvlink" in labels or "nvswitch" in labels or "gpu" not in labels:
                continue  # NVLink/NVSwitch/CPU entities: not per-GPU metrics
            uuid = _label(labels, "UUID", "uuid")
            if uuid is None or not labels["gpu"].isdigit():
                continue
            gi_text = labels.get("GPU_I_ID")
            gi = int(gi_text) if gi_text and gi_text.isdigit() else None
            ent = entities.get((uuid, gi))
            if ent is None:
                ent = entities[(uuid, gi)] = {
                    "gpu_index": int(labels["gpu"]),
                    "uuid": uuid,
                    "pci_bus_id": labels.get("pci_bus_id"),
                    "device": labels.get("device"),
                    "model": _label(labels, "modelName", "model_name"),
                    "gpu_instance_id": gi,
                    "gpu_instance_profile": labels.get("GPU_I_PROFILE"),
                    "mig_uuid": labels.get("dra_mig_device_uuid") or None,
                    "values": {},
                    "pods": [],
                }
            hostname = hostname or _label(labels, "Hostname", "hostname")
            driver = driver or labels.get("DCGM_FI_DRIVER_VERSION")
            pod = _label(labels, "pod", "pod_name")
            if pod:
                ref = PodRef(
                    _label(labels, "namespace", "pod_namespace") or "",
                    pod,
                    _label(labels, "container", "container_name") or "",
                )
                if ref not in ent["pods"]:
                    ent["pods"].append(ref)
            value = float(sample.value)
            if _is_blank(family.name, value):
                dropped += 1
                continue
            ent["values"][family.name] = value
    built = [DcgmEntity(**{**e, "pods": tuple(e["pods"])}) for e in entities.values()]
    return DcgmScrape(
        hostname=hostname,
        driver_version=driver,
        gpus=tuple(sorted((e for e in built if e.gpu_instance_id is None), key=lambda e: e.gpu_index)),
        mig=tuple(
            sorted(
                (e for e in built if e.gpu_instance_id is not None),
                key=lambda e: (e.gpu_index, e.gpu_instance_id or 0),
            )
        ),
        dropped=dropped,
        families=frozenset(families),
    )


def _fetcher(source: str | Callable[[], str], timeout: float) -> Callable[[], str]:
    if callable(source):
        return source
    if source.startswith(("http://", "https://")):
        url = source

        def fetch() -> str:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:
                    return resp.read().decode("utf-8")
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                raise GpuBackendError(f"scraping {url} failed ({exc}); retrying on the next tick") from exc

        return fetch
    text = source
    return lambda: text


class DcgmExporterBackend:
    """A ``GpuBackend`` over dcgm-exporter: each ``sample`` is one scrape.

    ``source`` is the exporter URL (``http://127.0.0.1:9400/metrics``), a callable returning the
    text, or the text itself (replays, tests). ``node`` overrides the exporter's hostname label.
    """

    def __init__(
        self,
        source: str | Callable[[], str],
        *,
        node: str | None = None,
        timeout: float = 2.0,
        emitter: str | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self._fetch = _fetcher(source, timeout)
        self._node = node
        self._emitter = emitter
        self._clock = clock
        self._last: DcgmScrape | None = None
        self._watch = FrameWatch(xid=True, ecc=True, remap=True, throttle=True)
        self._pending: list[GpuEvent] = []
        self.dropped = 0
        """sentinel values discarded over the backend's life (for the agent's own metrics)"""

    @property
    def node(self) -> str:
        if self._node:
            return self._node
        if self._last is not None and self._last.hostname:
            return self._last.hostname
        return socket.gethostname()

    def scrape(self) -> DcgmScrape:
        text = self._fetch()
        try:
            scrape = parse_dcgm_metrics(text)
        except ValueError as exc:
            raise GpuBackendError(
                f"dcgm-exporter text not parseable ({exc}); retrying on the next tick"
            ) from exc
        self._last = scrape
        self.dropped += scrape.dropped
        return scrape

    def inventory(self) -> NodeInventory:
        scrape = self._last or self.scrape()
        kids: dict[str, list[DcgmEntity]] = {}
        for e in scrape.mig:
            kids.setdefault(e.uuid, []).append(e)
        rows = {r["gpu_uuid"]: r for r in scrape.rows()}
        gpus = []
        for index, uuid, bus, name in scrape.physical():
            spec = find_model(name) if name else None
            total = rows[uuid].get("mem_total_mib")
            mig = tuple(
                MigInstance(
                    uuid=k.mig_uuid or f"{uuid}/gi{k.gpu_instance_id}",
                    profile=k.gpu_instance_profile or "unknown",
                    gpu_instance_id=k.gpu_instance_id or 0,
                    compute_instance_id=0,
                    memory_mib=_profile_memory(spec.mig_profiles if spec else (), k.gpu_instance_profile),
                )
                for k in kids.get(uuid, [])
            )
            gpus.append(
                GpuInfo(
                    uuid=uuid,
                    index=index,
                    model=name or "unknown",
                    memory_mib=int(total) if total is not None else ((spec.memory_mib or 0) if spec else 0),
                    pci_bus_id=bus or "unknown",
                    compute_capability=(spec.compute_capability or "0.0") if spec else "0.0",
                    tensor_cores=spec.tensor_cores if spec else False,
                    fp8=spec.fp8 if spec else False,
                    mig_mode=MigMode.ENABLED
                    if mig
                    else (MigMode.DISABLED if spec and spec.mig_profiles else MigMode.UNSUPPORTED),
                    mig_profiles=spec.mig_profiles if spec else (),
                    mig_instances=mig,
                )
            )
        return NodeInventory(
            source=self._emitter or f"agent/{self.node}",
            emitted_at=self._clock(),
            node=self.node,
            gpus=tuple(gpus),
            driver_version=scrape.driver_version,
        )

    def sample(self, now: float) -> GpuFrame:
        scrape = self.scrape()
        rows = scrape.rows()
        frame = GpuFrame.build(
            sampled_at=now,
            nodes=(self.node,),
            bounds=(0, len(rows)),
            gpu_uuid=[r["gpu_uuid"] for r in rows],
            gpu_index=[r["gpu_index"] for r in rows],
            columns={name: [r.get(name) for r in rows] for name in COLUMNS},  # type: ignore[misc]  # None: missing
        )
        self._pending += self._watch.update(frame)
        return frame

    def events(self, timeout: float = 0.0) -> list[GpuEvent]:
        """Events found by the last scrapes. Never blocks: the exporter has no push channel."""
        out, self._pending = self._pending, []
        return out

    def close(self) -> None:
        self._pending.clear()


def _profile_memory(profiles: tuple[Any, ...], name: str | None) -> int:
    for p in profiles:
        if p.name == name:
            return int(p.memory_mib)
    if name and name.endswith("gb"):
        gb = name.rsplit(".", 1)[-1][:-2]
        if gb.isdigit():
            return int(gb) * 1024
    return 0
