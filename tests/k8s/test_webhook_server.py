"""The binder's admission webhook server speaks TLS (the apiserver calls webhooks over HTTPS only)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from aiohttp import ClientSession, TCPConnector
from k8s_payloads import pod

from gpuaware.services.binder.settings import BinderSettings
from gpuaware.services.binder.webhook import WebhookServer


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a test certificate")
async def test_webhook_over_tls(tmp_path: Path) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(tmp_path / "tls.key"), "-out", str(tmp_path / "tls.crt")],
                   check=True, capture_output=True)
    srv = WebhookServer(0, str(tmp_path), host="127.0.0.1", default_queue="team-a")
    await srv.start()
    try:
        port = srv.runner.addresses[0][1]
        ctx = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u1", "operation": "CREATE", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                              "object": pod(**{"nvidia.com/gpu": "1"})}}
        async with ClientSession(connector=TCPConnector(ssl=ctx)) as s, \
                s.post(f"https://127.0.0.1:{port}/mutate", json=review) as r:
            assert r.status == 200 and (await r.json())["response"]["allowed"]
    finally:
        await srv.stop()
    with pytest.raises(FileNotFoundError, match=r"tls\.crt"):
        await WebhookServer(0, str(tmp_path / "absent")).start()


def test_webhook_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUAWARE_BINDER_WEBHOOK_PORT", "9443")
    monkeypatch.setenv("GPUAWARE_BINDER_WEBHOOK_CERT_DIR", "/etc/gpuaware/webhook")
    monkeypatch.setenv("GPUAWARE_BINDER_LEADER_ELECTION", "kubernetes")
    monkeypatch.setenv("GPUAWARE_BINDER_LEASE_NAMESPACE", "gpuaware-system")
    s = BinderSettings.from_env()
    assert (s.webhook_port, s.webhook_cert_dir, s.webhook_default_queue) == (9443, "/etc/gpuaware/webhook", "default")
    assert (s.leader_election, s.lease_k8s_namespace()) == ("kubernetes", "gpuaware-system")
