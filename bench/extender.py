"""Extender benchmark: filter + prioritize over 1,000 node names, as kube-scheduler calls them.

Why: kube-scheduler with an HTTP extender manages under 10 pods/s at 1,000 nodes (kubernetes#72634,
the JSON of 1,000 full Node objects per call); with ``nodeCacheCapable: true`` only names travel and
the answer comes from our cache. The goal is >= 500 pods/s.

What it runs: 1,000 nodes built from the recorded DGX A100 Node object (``../shared/k8s``) with a mix
of GPU counts (8, 4, 2, 1) translated by ``gpuaware.k8s.translate`` into the placement service's own
state (default profile ``GpuAware``), a quarter of their GPUs bound already; pods built from the
recorded pending Pod with a mix of asks (1, 2, 4, 8 whole GPUs, a 30 % HAMi fraction, a MIG-less
half GPU). For each pod: POST /filter with all 1,000 names, then POST /prioritize with the names the
filter passed, over loopback HTTP to the real aiohttp server in its own process (one keep-alive connection,
sequential, as kube-scheduler calls one extender), and the same two calls in process (the answer's own cost).
Beside it, interleaved run by run, the same server answering fixed bytes (``transport_ceiling``): what
the HTTP transport and this client cost alone on this machine at that moment.
Figures: pods/s over the whole run, p50 / p99 of one pod's filter + prioritize (``gpuaware.schemas.percentile``);
over HTTP the median of three runs (the machine is shared: each run's pods/s and p99 are kept, with
the load average). The client is the stdlib's http.client, the lightest Python client, since the
figure is meant to be the server's (kube-scheduler's Go client costs less than any Python one).
Pods are not bound between calls (kube-scheduler binds asynchronously): every pod sees the same cluster,
which is what a scheduling cycle over a quiet cluster sees.

Writes bench/results/extender.json (machine noted). Run: `make bench-extender`.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_paths import RESULTS_DIR, ROOT
from machine_info import load_average
from machine_info import machine as shared_machine

from gpuaware.schemas import percentile

K8S = Path(os.environ.get("GPUAWARE_SHARED_K8S", ROOT.parent / "shared" / "k8s"))
OUT = RESULTS_DIR / "extender.json"


def _world(num_nodes: int) -> tuple[Any, list[str]]:
    from gpuaware.k8s import node_inventory
    from gpuaware.placement import POLICIES
    from gpuaware.schemas import GpuSlice, PodBound
    from gpuaware.services.placement.state import PlacementState

    base = json.loads((K8S / "extender" / "object-node-dgx-a100.json").read_text())
    st = PlacementState(cluster_name="bench", source="bench", policy_name="GpuAware", policy_config=POLICIES["GpuAware"])
    rng = np.random.default_rng(42)
    names = []
    for i in range(num_nodes):
        n = copy.deepcopy(base)
        name = f"gpu-node-{i:04d}"
        gpus = int(rng.choice([8, 8, 4, 2, 1]))
        n["metadata"]["name"] = name
        n["metadata"]["labels"]["nvidia.com/gpu.count"] = str(gpus)
        n["status"]["allocatable"]["nvidia.com/gpu"] = str(gpus)
        st.apply_inventory(node_inventory(n, source="bench", cluster="bench"))
        names.append(name)
        busy = int(rng.integers(0, gpus + 1)) // 2
        if busy:
            sl = tuple(GpuSlice(gpu_uuid=f"{name}/gpu{g}", gpu_index=g, gpu_milli=1000, memory_mib=81920)
                       for g in range(busy))
            st.apply_bound(PodBound(source="bench", emitted_at=0.0, cluster="bench", pod_uid=f"busy-{i}",
                                    pod_name=f"busy-{i}", namespace="b", node=name, slices=sl, bound_at=0.0))
    return st, names


def _pods(count: int) -> list[dict[str, Any]]:
    base = json.loads((K8S / "extender" / "object-pod-pending.json").read_text())
    asks = [{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "8"},
            {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "20000"},
            {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}]
    out = []
    for i in range(count):
        p = copy.deepcopy(base)
        p["metadata"]["uid"] = f"bench-{i}"
        p["metadata"]["name"] = f"bench-{i}"
        res = {"cpu": "8", "memory": "64Gi", **asks[i % len(asks)]}
        p["spec"]["containers"][0]["resources"] = {"limits": res, "requests": res}
        out.append(p)
    return out


def _summary(lat: list[float], wall: float, n: int) -> dict[str, Any]:
    a = np.asarray(lat) * 1e3
    return {"pods": n, "pods_per_s": round(n / wall, 1), "p50_ms": round(percentile(a, 50), 3),
            "p99_ms": round(percentile(a, 99), 3), "max_ms": round(float(a.max()), 3)}


def _http(port: int, bodies: list[tuple[bytes, list[str], dict[str, Any]]]) -> tuple[dict[str, Any], int]:
    """The client side, as kube-scheduler: one keep-alive connection, one pod after the other. The
    stdlib's http.client (the lightest Python client: the figure is meant to be the server's)."""
    import http.client

    import msgspec

    dec = msgspec.json.Decoder()
    enc = msgspec.json.Encoder()
    lat: list[float] = []
    passed = 0
    conn = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"Content-Type": "application/json"}

    def post(verb: str, body: bytes) -> Any:
        conn.request("POST", "/" + verb, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"{verb}: HTTP {r.status}: {data[:200]!r}")
        return dec.decode(data)

    try:
        for body, _names, _pod in bodies[:20]:  # warm-up
            post("filter", body)
        t0 = time.perf_counter()
        for body, _names, pod in bodies:
            t = time.perf_counter()
            ok = post("filter", body)["NodeNames"] or []
            passed += len(ok)
            if len(ok) > 1:  # kube-scheduler skips prioritize for a single feasible node
                post("prioritize", enc.encode({"Pod": pod, "Nodes": None, "NodeNames": ok}))
            lat.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
    finally:
        conn.close()
    return _summary(lat, wall, len(bodies)), passed


def _extender(num_nodes: int) -> tuple[Any, list[str]]:
    from gpuaware.k8s import Extender
    from gpuaware.services.placement import convert

    st, names = _world(num_nodes)
    ext = Extender(planner=st.planner, cluster="bench",
                   request_of=lambda p: convert.pod_request(p, st.planner.view.models, st.capability))
    return ext, names


def serve(port: int, num_nodes: int, canned: bool = False) -> None:
    """The extender's server in its own process (kube-scheduler is another process too). `canned`: the
    same HTTP server answering the first pod's answers for every request (no translation, no engine):
    what the transport and this Python client cost alone on this machine, run beside the real one."""
    import gc

    from aiohttp import web

    from gpuaware.k8s import extender_app

    ext, names = _extender(num_nodes)
    gc.freeze()  # as run_service does once a service is up (the placement service serves the extender)
    if not canned:
        web.run_app(extender_app(ext, max_body=8 << 20), host="127.0.0.1", port=port, print=None, access_log=None)
        return
    import msgspec

    pod = _pods(1)[0]
    filtered = msgspec.json.encode(ext.answer("filter", json.dumps({"Pod": pod, "NodeNames": names}).encode()))
    ok = msgspec.json.decode(filtered)["NodeNames"]
    ranked = msgspec.json.encode(ext.answer("prioritize", json.dumps({"Pod": pod, "NodeNames": ok}).encode()))

    def fixed(body: bytes):  # type: ignore[no-untyped-def]  # an aiohttp handler factory
        async def handler(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(body=body, content_type="application/json")
        return handler

    async def healthz(_r: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=8 << 20)
    app.router.add_post("/filter", fixed(filtered))
    app.router.add_post("/prioritize", fixed(ranked))
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def _wait_up(port: int, proc: subprocess.Popen[bytes]) -> None:
    from aiohttp import ClientError, ClientSession

    async with ClientSession() as s:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError("the extender server exited")
            try:
                async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                    if r.status == 200:
                        return
            except ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("the extender server did not come up in 60 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--repeats", type=int, default=3, help="HTTP runs; the median run (by pods/s) is reported")
    ap.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--canned", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve is not None:
        serve(args.serve, args.nodes, canned=args.canned)
        return 0
    if not (K8S / "extender" / "object-node-dgx-a100.json").exists():
        print(f"shared Kubernetes payloads absent under {K8S} (set GPUAWARE_SHARED_K8S)", file=sys.stderr)
        return 2
    ext, names = _extender(args.nodes)
    pods = _pods(args.pods)
    bodies = [(json.dumps({"Pod": p, "Nodes": None, "NodeNames": names}).encode(), names, p) for p in pods]
    # in process: the answers alone (decode, translate, engine, encode)
    import msgspec

    enc = msgspec.json.Encoder()
    for body, _n, _p in bodies[:20]:
        ext.answer("filter", body)
    lat = []
    t0 = time.perf_counter()
    passed_names = msgspec.json.Decoder(dict[str, Any])
    for body, _n, pod in bodies:
        t = time.perf_counter()
        ok = passed_names.decode(enc.encode(ext.answer("filter", body)))["NodeNames"]
        if ok and len(ok) > 1:
            enc.encode(ext.answer("prioritize", enc.encode({"Pod": pod, "NodeNames": ok})))
        lat.append(time.perf_counter() - t)
    in_process = _summary(lat, time.perf_counter() - t0, len(bodies))
    def start(canned: bool) -> tuple[subprocess.Popen[bytes], int]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        cmd = [sys.executable, __file__, "--serve", str(port), "--nodes", str(args.nodes)]
        proc = subprocess.Popen(cmd + (["--canned"] if canned else []))
        asyncio.run(_wait_up(port, proc))
        return proc, port

    procs = []
    try:
        real, real_port = start(False)
        procs.append(real)
        canned, canned_port = start(True)
        procs.append(canned)
        runs, ceiling = [], []
        for _ in range(args.repeats):  # interleaved: both see the same machine load
            runs.append(_http(real_port, bodies))
            ceiling.append(_http(canned_port, bodies)[0])
        passed = runs[0][1]
        by_rate = sorted((r[0] for r in runs), key=lambda r: r["pods_per_s"])
        http = {**by_rate[len(by_rate) // 2], "repeats": [r["pods_per_s"] for r in (x[0] for x in runs)],
                "p99_ms_repeats": [r["p99_ms"] for r in (x[0] for x in runs)]}
        ceiling.sort(key=lambda r: r["pods_per_s"])
        transport = {**ceiling[len(ceiling) // 2], "repeats": [r["pods_per_s"] for r in ceiling]}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    result = {
        "what": "kube-scheduler extender: filter + prioritize per pod over NodeNames (nodeCacheCapable), "
                "1 keep-alive connection, sequential",
        "command": "make bench-extender",
        "nodes": args.nodes, "pods": args.pods, "profile": "GpuAware",
        "mean_feasible_nodes_per_pod": round(passed / len(bodies), 1),
        "http": http, "in_process": in_process,
        "transport_ceiling": {**transport, "what": "the same server and client with fixed answers (no translation, "
                              "no engine): the most this harness measures on this machine, run beside `http`"},
        "goal_pods_per_s": 500, "meets_goal": http["pods_per_s"] >= 500,
        "baseline": "kube-scheduler with an extender: < 10 pods/s at 1,000 nodes (kubernetes#72634)",
        "machine": {**shared_machine("aiohttp", "msgspec", "numpy", "kubernetes"), "load_average": load_average()},
        "payloads": "../shared/k8s/extender (recorded Pod and Node objects)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("http", "transport_ceiling", "in_process", "meets_goal")}, indent=2))
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
