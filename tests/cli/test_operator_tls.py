"""Operator commands against a real `gpuaware up --tls` stack.

`health cordon` / `uncordon` and `alerts bridge` take `--tls-ca` (default NATS_TLS_CA, else the CA the
running stack's stack.json records when the URL is the stack's): they reach a TLS NATS without being
told its CA on the stack's machine, and a CA that does not verify the server ends them with
"cannot reach NATS at URL: <the client's reason>" on standard error, exit 3, no traceback.

One TLS stack (NATS only) for the module: each embedded start costs seconds on a loaded machine. The
health-scoring service is stood in for by a responder on `health.cordon` (over the same TLS), since
what is under test is the command's connection."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from gpuaware import bus
from gpuaware.cli import alerts
from gpuaware.cli.main import app
from gpuaware.devstack import StackState, stack_down, stack_up
from gpuaware.devstack.tls import make_server_certificates
from gpuaware.schemas import HEALTH_CORDON, CordonReply, CordonRequest, HealthState

EXTERNAL_DB = {"DATABASE_URL": "postgresql://u@elsewhere/db"}
"""PostgreSQL somebody else's: only NATS is started"""
GPU = "GPU-0f1e2d3c-tls"

runner = CliRunner()


class _Responder:
    """A stand-in for the health-scoring service's `health.cordon` endpoint, on its own thread and loop."""

    def __init__(self, state: StackState) -> None:
        self.state = state
        self.asked: list[CordonRequest] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),), daemon=True)

    async def _serve(self) -> None:
        self.stop = asyncio.Event()
        async with bus.connected(self.state.nats_url, name="stand-in", initial_timeout=10,
                                 tls=bus.tls_context(self.state.nats_tls_ca)) as nc:

            async def answer(msg: Any) -> None:
                req = msgspec.json.decode(msg.data, type=CordonRequest)
                self.asked.append(req)
                await msg.respond(msgspec.json.encode(CordonReply(
                    source="stand-in", emitted_at=time.time(), gpu_uuid=req.gpu_uuid, action=req.action,
                    previous=HealthState.HEALTHY, current=req.state or HealthState.HEALTHY, at=time.time(),
                    by=req.by, reason=req.reason, changed=True)))

            await nc.subscribe(HEALTH_CORDON, cb=answer)
            await nc.flush()
            self.ready.set()
            await self.stop.wait()

    def __enter__(self) -> _Responder:
        self.thread.start()
        assert self.ready.wait(60), "the stand-in responder did not connect within 60 s"
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, StackState]]:
    """(the folder whose .gpuaware holds a running `up --tls` stack, its state)"""
    home = tmp_path_factory.mktemp("operator-tls")
    data = home / ".gpuaware"
    state = stack_up(data, nats_port=0, tls=True, env=EXTERNAL_DB).state
    try:
        yield home, state
    finally:
        stack_down(data)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NATS_URL", "NATS_TLS_CA", "NATS_USER", "NATS_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _cordon(url: str, *extra: str) -> Any:
    return runner.invoke(app, ["health", "cordon", GPU, "--reason", "tls check", "--by", "ops@test",
                               "--nats-url", url, "--timeout", "5", *extra])


def _unreachable(result: Any, url: str) -> str:
    """The refusal: exit 3, the reason on standard error (nothing on standard output), no traceback."""
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output and result.stdout.strip() == ""
    said = " ".join(result.stderr.split())
    assert f"cannot reach NATS at {url}:" in said, said
    return said


def test_health_cordon_reaches_the_stacks_tls_nats_with_the_ca_its_record_names(
        tls_stack: tuple[Path, StackState], clean_env: pytest.MonkeyPatch) -> None:
    # `health cordon` against an `up --tls` stack: CERTIFICATE_VERIFY_FAILED, then "cannot reach NATS
    # at ...:" with no reason, on standard output
    home, state = tls_stack
    clean_env.chdir(home)  # where `gpuaware up` ran: .gpuaware/stack.json names the CA
    assert state.nats_url.startswith("tls://")
    with _Responder(state) as service:
        done = _cordon(state.nats_url)
        assert done.exit_code == 0, done.output
        assert f"cordon GPU {GPU}: healthy -> quarantined" in " ".join(done.stdout.split())
        # the same server named nats:// (as NATS_URL often is) is the stack's too
        plain = state.nats_url.replace("tls://", "nats://")
        again = runner.invoke(app, ["health", "uncordon", GPU, "--reason", "tls check", "--nats-url", plain,
                                    "--timeout", "5"])
        assert again.exit_code == 0, again.output
        assert [r.action.value for r in service.asked] == ["cordon", "uncordon"]


def test_tls_ca_and_nats_tls_ca_name_the_ca_where_no_stack_record_does(
        tls_stack: tuple[Path, StackState], clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _home, state = tls_stack
    clean_env.chdir(tmp_path)  # no stack here: only the option or the variable tells the CA
    said = _unreachable(_cordon(state.nats_url), state.nats_url)
    assert "CERTIFICATE_VERIFY_FAILED" in said  # the default trust store does not know the stack's CA
    with _Responder(state) as service:
        assert _cordon(state.nats_url, "--tls-ca", state.nats_tls_ca).exit_code == 0
        clean_env.setenv("NATS_TLS_CA", state.nats_tls_ca)
        assert _cordon(state.nats_url).exit_code == 0
        assert len(service.asked) == 2


def test_a_ca_that_does_not_verify_the_server_is_refused_with_the_reason_on_stderr(
        tls_stack: tuple[Path, StackState], clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home, state = tls_stack
    clean_env.chdir(home)
    other = make_server_certificates(tmp_path / "other-ca")
    said = _unreachable(_cordon(state.nats_url, "--tls-ca", str(other.ca)), state.nats_url)
    assert "CERTIFICATE_VERIFY_FAILED" in said and "SSLCertVerificationError" in said
    missing = _cordon(state.nats_url, "--tls-ca", str(tmp_path / "absent.pem"))
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    assert "--tls-ca: cannot use the CA certificate" in " ".join(missing.stderr.split())


def test_alerts_bridge_hands_the_stacks_ca_to_the_service_and_refuses_one_that_does_not_verify(
        tls_stack: tuple[Path, StackState], clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # `alerts bridge` on an `up --tls` stack: the service retried CERTIFICATE_VERIFY_FAILED for ever
    home, state = tls_stack
    clean_env.chdir(home)
    handed: dict[str, Any] = {}

    def execve(path: str, argv: list[str], env: dict[str, str]) -> None:  # instead of replacing the test process
        handed.update(path=path, env=env)
        raise SystemExit(0)

    clean_env.setattr(alerts.os, "execve", execve)
    other = make_server_certificates(tmp_path / "other-ca")
    args = ["alerts", "bridge", "--listen-port", "9", "--nats-url", state.nats_url]
    said = _unreachable(runner.invoke(app, [*args, "--tls-ca", str(other.ca)]), state.nats_url)
    assert "CERTIFICATE_VERIFY_FAILED" in said and not handed
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert handed["env"]["NATS_URL"] == state.nats_url and handed["env"]["NATS_TLS_CA"] == state.nats_tls_ca
