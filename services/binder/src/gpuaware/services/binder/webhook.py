"""The admission webhooks (``gpuaware.k8s.admission``) served over TLS by the binder in cluster mode.

Why the binder: it is the service that already speaks to Kubernetes and runs in every cluster-mode
install; both replicas answer (the webhook logic is pure and stateless). Started when
``GPUAWARE_BINDER_WEBHOOK_PORT`` is set, with the certificate and key from
``GPUAWARE_BINDER_WEBHOOK_CERT_DIR`` (``tls.crt``, ``tls.key``: the chart's Secret); the apiserver only
calls webhooks over HTTPS.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from aiohttp import web

from gpuaware.k8s import admission_app

__all__ = ["WebhookServer"]

log = logging.getLogger(__name__)


class WebhookServer:
    def __init__(self, port: int, cert_dir: str, *, host: str = "0.0.0.0", default_queue: str = "default") -> None:
        self.port, self.host = port, host
        self.cert_dir = Path(cert_dir)
        self.runner = web.AppRunner(admission_app(default_queue=default_queue), access_log=None)

    def _tls(self) -> ssl.SSLContext | None:
        crt, key = self.cert_dir / "tls.crt", self.cert_dir / "tls.key"
        if not crt.is_file() or not key.is_file():
            raise FileNotFoundError(f"webhook TLS needs {crt} and {key}")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(crt, key)
        return ctx

    async def start(self) -> None:
        tls = self._tls() if str(self.cert_dir) else None
        await self.runner.setup()
        await web.TCPSite(self.runner, self.host, self.port, ssl_context=tls).start()
        log.info("admission webhooks on %s://%s:%d (/mutate, /validate)", "https" if tls else "http", self.host,
                 self.port)

    async def stop(self) -> None:
        await self.runner.cleanup()
