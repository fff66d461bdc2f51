"""Lease election through the official client against a loopback server that keeps one Lease with the
apiserver's optimistic concurrency (resourceVersion preconditions: a stale write gets 409)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from kubernetes import client

from gpuaware.k8s.election import KubeLeaderLease

PATH = "/apis/coordination.k8s.io/v1/namespaces/gpuaware-system/leases"


class _Leases(BaseHTTPRequestHandler):
    lease: ClassVar[dict[str, Any] | None] = None
    rv: ClassVar[int] = 0
    lock = threading.Lock()

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def do_GET(self) -> None:
        with self.lock:
            if type(self).lease is None:
                return self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
            self._send(200, type(self).lease)

    def _store(self, body: dict[str, Any]) -> None:
        cls = type(self)
        cls.rv += 1
        body["metadata"]["resourceVersion"] = str(cls.rv)
        cls.lease = body

    def do_POST(self) -> None:
        body = self._body()
        with self.lock:
            if type(self).lease is not None:
                return self._send(409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"})
            self._store(body)
            self._send(201, body)

    def do_PUT(self) -> None:
        body = self._body()
        with self.lock:
            cur = type(self).lease
            if cur is None or body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
                return self._send(409, {"kind": "Status", "code": 409, "reason": "Conflict"})
            self._store(body)
            self._send(200, body)

    def log_message(self, *_a: Any) -> None:
        pass


@pytest.fixture
def coordination() -> Iterator[client.CoordinationV1Api]:
    _Leases.lease, _Leases.rv = None, 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Leases)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cfg = client.Configuration(host=f"http://127.0.0.1:{srv.server_address[1]}")
        yield client.CoordinationV1Api(client.ApiClient(cfg))
    finally:
        srv.shutdown()
        srv.server_close()


async def test_one_leader_then_hand_over(coordination: client.CoordinationV1Api) -> None:
    changes: list[tuple[str, bool]] = []

    def candidate(name: str) -> KubeLeaderLease:
        async def on_change(leading: bool) -> None:
            changes.append((name, leading))

        return KubeLeaderLease("gpuaware-system", "placement-default", name, duration_s=5, renew_s=0.05,
                               retry_s=0.05, on_change=on_change, coordination=coordination)

    a = await candidate("a").start()
    assert await a.wait_leading(timeout=20)
    b = await candidate("b").start()
    for _ in range(10):  # b tries (and is refused) while a renews
        await asyncio.sleep(0.06)
    assert not b.leading and a.leading
    assert _Leases.lease is not None and _Leases.lease["spec"]["holderIdentity"] == "a"
    await a.stop(release=True)  # empties holderIdentity: b takes over at its next try
    assert await b.wait_leading(timeout=20)
    assert _Leases.lease["spec"]["holderIdentity"] == "b"
    assert _Leases.lease["spec"]["leaseTransitions"] == 1
    await b.stop()
    assert changes == [("a", True), ("a", False), ("b", True), ("b", False)]
