"""A loopback apiserver for our cluster-scoped custom resources (GPUQueue, GPUPolicy), for the services'
Kubernetes-mode tests: the official client lists, watches and patches it over HTTP exactly as it would a
cluster's.

What it does as the apiserver does: every write takes the next resourceVersion; a spec change bumps
``metadata.generation``, a status patch does not; LIST answers ``<Kind>List`` with the collection's
resourceVersion; WATCH streams (chunked, one JSON event per line) every change after the version asked
for, then what comes; a version older than the last compaction gets ``ERROR 410 Expired``; status
patches are JSON merge patches on ``/status``. Streams end after a quiet second (the client re-watches
from its version, as after the apiserver's own timeout), so nothing outlives a test.

The test writes objects as ``kubectl apply`` / ``kubectl delete`` would (``apply``, ``delete``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PREFIX = "/apis/gpuaware.io/v1alpha1/"
QUIET_S = 1.0


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch."""
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class FakeApiServer:
    def __init__(self) -> None:
        self.rv = 1000
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.log: list[tuple[int, str, dict[str, Any]]] = []
        """(resourceVersion, plural, watch event)"""
        self.compacted = 0
        self.status_patches: list[tuple[str, str, dict[str, Any]]] = []
        self.cond = threading.Condition()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_a: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._get(self)

            def do_PATCH(self) -> None:
                fake._patch(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def kubeconfig(self, directory: Path) -> str:
        """A kubeconfig naming this server (what ``KUBECONFIG`` points the services at)."""
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
        return str(path)

    # -- what the test does (kubectl) ---------------------------------------------------------------

    def _record(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        self.log.append((self.rv, plural, {"type": kind, "object": copy.deepcopy(obj)}))
        self.cond.notify_all()

    def apply(self, plural: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            self.rv += 1
            objs = self.objects.setdefault(plural, {})
            old = objs.get(name)
            if old is None:
                obj = {"apiVersion": "gpuaware.io/v1alpha1", "kind": kind,
                       "metadata": {"name": name, "uid": str(uuid.uuid4()), "generation": 1,
                                    "resourceVersion": str(self.rv), "creationTimestamp": "2026-03-14T09:00:00Z"},
                       "spec": copy.deepcopy(spec)}
                event = "ADDED"
            else:
                obj = copy.deepcopy(old)
                if obj["spec"] != spec:
                    obj["metadata"]["generation"] += 1
                obj["spec"] = copy.deepcopy(spec)
                obj["metadata"]["resourceVersion"] = str(self.rv)
                event = "MODIFIED"
            objs[name] = obj
            self._record(plural, event, obj)
            return copy.deepcopy(obj)

    def delete(self, plural: str, name: str) -> None:
        with self.cond:
            self.rv += 1
            obj = self.objects[plural].pop(name)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._record(plural, "DELETED", obj)

    def compact(self) -> None:
        """Forget history: every watch from an older version gets 410 Gone and must relist."""
        with self.cond:
            self.rv += 1
            self.compacted = self.rv
            self.cond.notify_all()

    def get(self, plural: str, name: str) -> dict[str, Any]:
        with self.cond:
            return copy.deepcopy(self.objects[plural][name])

    def accepted(self, plural: str, name: str) -> dict[str, Any] | None:
        """The object's Accepted condition (None while it has none)."""
        obj = self.objects.get(plural, {}).get(name) or {}
        conds = (obj.get("status") or {}).get("conditions") or []
        return next((dict(c) for c in conds if c.get("type") == "Accepted"), None)

    # -- what the client does -----------------------------------------------------------------------

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlparse(h.path)
        q = urllib.parse.parse_qs(url.query)
        plural = url.path.removeprefix(PREFIX)
        if not url.path.startswith(PREFIX) or "/" in plural:
            return self._send(h, 404, {"kind": "Status", "code": 404, "message": "not found"})
        if q.get("watch") != ["true"]:
            with self.cond:
                items = [copy.deepcopy(o) for _, o in sorted(self.objects.get(plural, {}).items())]
                kind = plural.removesuffix("s").replace("gpupolicie", "gpupolicy")
                return self._send(h, 200, {"apiVersion": "gpuaware.io/v1alpha1", "kind": f"{kind}List",
                                           "metadata": {"resourceVersion": str(self.rv)}, "items": items})
        since = int(q.get("resourceVersion", ["0"])[0])
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        with contextlib.suppress(OSError):
            for event in self._stream(plural, since):
                line = json.dumps(event).encode() + b"\n"
                h.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()

    def _after(self, plural: str, since: int) -> list[tuple[int, dict[str, Any]]]:
        return [(rv, e) for rv, p, e in self.log if rv > since and p == plural]

    def _stream(self, plural: str, since: int) -> Iterator[dict[str, Any]]:
        """The events after `since`, then new ones, until a quiet second (or 410)."""
        while True:
            with self.cond:
                def ready(since: int = since) -> bool:
                    return since < self.compacted or bool(self._after(plural, since))

                if not self.cond.wait_for(ready, timeout=QUIET_S):
                    return
                gone = since < self.compacted
                news = [] if gone else self._after(plural, since)
                rv_now = self.rv
            if gone:
                yield {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                   "status": "Failure", "reason": "Expired", "code": 410,
                                                   "message": f"too old resource version: {since} ({rv_now})"}}
                return
            for rv, e in news:
                since = rv
                yield e

    def _patch(self, h: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlparse(h.path)
        parts = url.path.removeprefix(PREFIX).split("/")
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length", "0"))) or b"{}")
        if len(parts) != 3 or parts[2] != "status" or h.headers.get("Content-Type") != "application/merge-patch+json":
            return self._send(h, 415, {"kind": "Status", "code": 415, "message": "only status merge patches"})
        plural, name = parts[0], parts[1]
        with self.cond:
            obj = self.objects.get(plural, {}).get(name)
            if obj is None:
                return self._send(h, 404, {"kind": "Status", "code": 404, "message": f"{name} not found"})
            self.rv += 1
            obj["status"] = _merge(obj.get("status") or {}, body.get("status") or {})
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.status_patches.append((plural, name, body))
            self._record(plural, "MODIFIED", obj)
            answer = copy.deepcopy(obj)
        self._send(h, 200, answer)

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
