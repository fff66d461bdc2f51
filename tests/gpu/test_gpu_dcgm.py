"""dcgm-exporter parsing on the real exporter samples (../shared/k8s/telemetry/)."""

from __future__ import annotations

import http.server
import re
import socket
import threading

import msgspec
import pytest

from gpuaware.gpu import (
    DcgmExporterBackend,
    EventKind,
    GpuBackend,
    GpuBackendError,
    PodRef,
    parse_dcgm_metrics,
)
from gpuaware.schemas import GpuSampled, MigMode

T0 = 1_767_225_600.0
GPU0 = "GPU-5b1e8c3a-77d2-4f61-9a0e-1c2d3e4f5a6b"
GPU2 = "GPU-c3d4e5f6-0a1b-4c2d-9e3f-4a5b6c7d8e9f"


def _rows(text: str) -> dict[int, dict]:
    return {r["gpu_index"]: r for r in parse_dcgm_metrics(text).rows()}


def test_every_default_family_and_the_node_labels(dcgm_sample: str) -> None:
    scrape = parse_dcgm_metrics(dcgm_sample)
    # the sample holds exactly the 25 uncommented rows of default-counters.csv, for 3 GPUs
    assert len(scrape.families) == 25
    assert [g.gpu_index for g in scrape.gpus] == [0, 1, 2]
    assert scrape.mig == ()
    assert scrape.hostname == "gpu-node-07"
    assert scrape.driver_version == "550.90.07"  # a 'label' counter, not a metric
    assert scrape.dropped == 0
    assert {g.model for g in scrape.gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert scrape.gpus[0].pci_bus_id == "00000000:07:00.0"


@pytest.mark.parametrize(
    "gpu, column, expected",
    [
        (0, "util_pct", 98),  # DCGM_FI_DEV_GPU_UTIL 98
        (1, "util_pct", 97),
        (2, "util_pct", 0),  # the idle GPU
        (0, "mem_util_pct", 41),  # DCGM_FI_DEV_MEM_COPY_UTIL
        (0, "mem_used_mib", 78264),  # FB_USED
        (0, "mem_total_mib", 81920),  # FB_USED 78264 + FB_FREE 3095 + FB_RESERVED 561 = 80 GiB
        (2, "mem_total_mib", 81920),  # 1 + 81358 + 561
        (1, "temperature_c", 58),  # GPU_TEMP
        (2, "mem_temperature_c", 33),  # MEMORY_TEMP: the idle GPU's memory is warmer than its core (31)
        (0, "power_w", 312.455),  # POWER_USAGE 312.455000 (W, %f)
        (2, "sm_clock_mhz", 210),  # idle SM clock
        (0, "mem_clock_mhz", 1593),
        (1, "remapped_rows_correctable", 1),  # CORRECTABLE_REMAPPED_ROWS, a counter (parser adds _total)
        (0, "remapped_rows_uncorrectable", 0),
        (0, "pcie_replay", 0),  # PCIE_REPLAY_COUNTER, a counter
        (0, "xid_last", 0),  # XID_ERRORS gauge: no XID yet
        (0, "tensor_active_pct", 41.2057),  # PROF_PIPE_TENSOR_ACTIVE 0.412057 ratio -> percent
        (0, "throttle_reasons", None),  # not a default counter
        (0, "ecc_uncorrected_volatile", None),  # commented out in default-counters.csv
        (0, "power_limit_w", None),
    ],
)
def test_columns_from_the_sample(dcgm_sample: str, gpu: int, column: str, expected: float | None) -> None:
    value = _rows(dcgm_sample)[gpu].get(column)
    if expected is None:
        assert value is None
    else:
        assert value == pytest.approx(expected)


def test_pods_are_attached_to_their_gpus(dcgm_sample: str) -> None:
    scrape = parse_dcgm_metrics(dcgm_sample)
    pods = {g.gpu_index: g.pods for g in scrape.gpus}
    # GPUs 0 and 1 run the 2-GPU job; GPU 2 has no pod labels at all (current exporter code)
    assert pods[0] == pods[1] == (PodRef("ml-team-a", "llm-train-7f9c4-0", "trainer"),)
    assert pods[2] == ()


@pytest.mark.parametrize(
    "rename",
    [
        {"Hostname=": "hostname="},  # main since d5e5f51 (2026-05-12)
        {
            "UUID=": "uuid=",
            "pod=": "pod_name=",
            "namespace=": "pod_namespace=",
            "container=": "container_name=",
        },
    ],
    ids=["lower-case-hostname", "use-old-namespace"],
)
def test_label_spellings_give_the_same_result(dcgm_sample: str, rename: dict[str, str]) -> None:
    text = dcgm_sample
    for old, new in rename.items():
        text = re.sub(rf"(?<=[{{,]){re.escape(old)}", new, text)
    assert text != dcgm_sample
    a, b = parse_dcgm_metrics(dcgm_sample), parse_dcgm_metrics(text)
    assert b.hostname == "gpu-node-07"
    assert b.rows() == a.rows()
    assert [g.pods for g in b.gpus] == [g.pods for g in a.gpus]


def test_family_order_does_not_matter(dcgm_sample: str) -> None:
    # the exporter ranges over a Go map: families come in any order between scrapes
    header, *blocks = re.split(r"(?m)^(?=# HELP )", dcgm_sample)
    shuffled = header + "".join(reversed(blocks))
    assert parse_dcgm_metrics(shuffled).rows() == parse_dcgm_metrics(dcgm_sample).rows()


@pytest.mark.parametrize(
    "family, gpu, sentinel, column",
    [
        # README-era exporters leaked DCGM_INT64_BLANK + 2 (NOT_SUPPORTED) for the memory temperature
        ("DCGM_FI_DEV_MEMORY_TEMP", "2", "9223372036854775794", "mem_temperature_c"),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "0", "9223372036854775792", "pcie_replay"),
        # a double field: DCGM_FP64_BLANK = 2^47
        ("DCGM_FI_DEV_POWER_USAGE", "1", "140737488355328.000000", "power_w"),
        ("DCGM_FI_DEV_GPU_TEMP", "0", "NaN", "temperature_c"),
    ],
)
def test_sentinels_are_dropped(dcgm_sample: str, family: str, gpu: str, sentinel: str, column: str) -> None:
    pattern = re.compile(rf'(?m)^({family}\{{gpu="{gpu}",[^}}]*\}}) \S+$')
    text, n = pattern.subn(lambda m: f"{m.group(1)} {sentinel}", dcgm_sample)
    assert n == 1
    scrape = parse_dcgm_metrics(text)
    assert scrape.dropped == 1
    assert _rows(text)[int(gpu)].get(column) is None
    frame = DcgmExporterBackend(text).sample(T0)
    assert frame.value(column, int(gpu)) is None
    assert frame.dropped == 0  # already removed by the parser, nothing absurd reached the frame


def test_missing_gpu_util_falls_back_to_graphics_engine_activity(dcgm_sample: str) -> None:
    text = re.sub(r'(?m)^DCGM_FI_DEV_GPU_UTIL\{gpu="0",.*\n', "", dcgm_sample)
    # PROF_GR_ENGINE_ACTIVE 0.973112 of GPU 0 -> 97.3112 %
    assert _rows(text)[0]["util_pct"] == pytest.approx(97.3112)


def test_mig_instances(dcgm_mig_sample: str) -> None:
    scrape = parse_dcgm_metrics(dcgm_mig_sample)
    assert scrape.gpus == ()  # only GPU-instance series in this sample
    assert [(m.gpu_instance_id, m.gpu_instance_profile) for m in scrape.mig] == [
        (2, "3g.40gb"),
        (11, "1g.10gb"),
        (13, "1g.10gb"),
    ]
    assert scrape.mig[0].pods == (PodRef("ml-team-b", "bert-ft-0", "trainer"),)
    assert scrape.mig[1].pods == ()
    (row,) = scrape.rows()
    assert row["gpu_index"] == 3
    assert row["mem_used_mib"] == 35102 + 0 + 3811  # FB_USED summed over the three instances = 38913
    # slice-weighted GR_ENGINE_ACTIVE: (0.881206*3 + 0*1 + 0.214330*1) / 7 * 100 = 40.8278 %
    assert row["util_pct"] == pytest.approx(40.8278, abs=1e-3)
    assert "mem_total_mib" not in row  # no FB_FREE per instance: unknown, not guessed


def test_mig_inventory(dcgm_mig_sample: str) -> None:
    inv = DcgmExporterBackend(dcgm_mig_sample).inventory()
    assert inv.node == "gpu-node-07"
    (gpu,) = inv.gpus
    assert gpu.mig_mode is MigMode.ENABLED
    # memory per instance from the A100-80GB profile table: 3g.40gb 40192 MiB, 1g.10gb 9856 MiB
    assert [(m.gpu_instance_id, m.profile, m.memory_mib) for m in gpu.mig_instances] == [
        (2, "3g.40gb", 40192),
        (11, "1g.10gb", 9856),
        (13, "1g.10gb", 9856),
    ]
    assert gpu.memory_mib == 81920  # not measured under MIG: the model's catalog value


def _with_xid(text: str, gpu: str, value: int) -> str:
    pattern = re.compile(rf'(?m)^(DCGM_FI_DEV_XID_ERRORS\{{gpu="{gpu}",[^}}]*\}}) \S+$')
    return pattern.sub(lambda m: f"{m.group(1)} {value}", text)


@pytest.mark.parametrize(
    "gauge, expected",
    [
        # the gauge holds the LAST XID: an event only when it changes to a non-zero value
        ([0, 0, 79, 79, 48, 0, 31], [(3, 79), (5, 48), (7, 31)]),
        ([43, 43, 43], []),  # non-zero at the first scrape: history (xid_last column), not news
        ([43, 13], [(2, 13)]),
        ([0, 79, 0, 79], [(2, 79), (4, 79)]),  # back to 0 (exporter restart) then 79 again: new
    ],
)
def test_last_xid_gauge_semantics(
    dcgm_sample: str, gauge: list[int], expected: list[tuple[int, int]]
) -> None:
    texts = iter([_with_xid(dcgm_sample, "1", v) for v in gauge])
    backend = DcgmExporterBackend(lambda: next(texts))
    seen = []
    for k in range(1, len(gauge) + 1):
        frame = backend.sample(T0 + k)
        assert frame.value("xid_last", 1) == gauge[k - 1]
        seen += [(k, e.code) for e in backend.events() if e.kind is EventKind.XID]
        assert all(e.gpu_index == 1 for e in backend.events())
    assert seen == expected


def test_counter_growth_between_scrapes_is_an_event(dcgm_sample: str) -> None:
    grown = re.sub(
        r'(?m)^(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS\{gpu="0",[^}]*\}) 0$', r"\1 2", dcgm_sample
    )
    texts = iter([dcgm_sample, grown])
    backend = DcgmExporterBackend(lambda: next(texts))
    backend.sample(T0)
    backend.sample(T0 + 1)
    (event,) = backend.events()
    assert (event.kind, event.gpu_uuid, event.code, event.at) == (EventKind.ROW_REMAP, GPU0, 2, T0 + 1)


def test_messages_validate_against_the_contract(dcgm_sample: str) -> None:
    backend = DcgmExporterBackend(dcgm_sample, node="n7")
    assert isinstance(backend, GpuBackend)
    (msg,) = backend.sample(T0).to_messages(source="agent/n7", interval_s=1.0, seq=4)
    decoded = msgspec.json.decode(msgspec.json.encode(msg), type=GpuSampled)
    assert decoded.node == "n7" and decoded.seq == 4
    assert decoded.gpu_uuid[2] == GPU2
    assert decoded.mem_used_mib == (78264, 78488, 1)  # ints stay ints on the wire
    assert decoded.throttle_reasons == ()  # no GPU reports it: "not collected by this agent"
    assert decoded.power_w == (312.455, 327.918, 61.204)


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def test_scrape_over_http_and_a_clear_error_when_down(dcgm_sample: str) -> None:
    _Handler.body = dcgm_sample.encode()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        frame = DcgmExporterBackend(url, timeout=2.0).sample(T0)
        assert frame.nodes == ("gpu-node-07",) and len(frame) == 3
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(GpuBackendError, match="retrying on the next tick"):
        DcgmExporterBackend(f"http://127.0.0.1:{port}/metrics", timeout=0.5).sample(T0)


def test_garbage_text_is_a_transient_error() -> None:
    with pytest.raises(GpuBackendError, match="not parseable"):
        DcgmExporterBackend('DCGM_FI_DEV_GPU_UTIL{gpu="0" 12\n').sample(T0)
