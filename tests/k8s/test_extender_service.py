"""The placement service's extender server: started on its view, answering the recorded filter."""

from __future__ import annotations

from aiohttp import ClientSession
from extender_world import state
from k8s_payloads import shared

from gpuaware.services.placement.extender_http import ExtenderServer
from gpuaware.services.placement.settings import PlacementSettings


async def test_extender_server_answers_from_the_service_state() -> None:
    srv = ExtenderServer(state(), "127.0.0.1", 0)
    await srv.start()
    try:
        host, port = srv.runner.addresses[0][:2]
        async with ClientSession() as s:
            async with s.post(f"http://{host}:{port}/filter",
                              data=shared("extender/filter-request.json").read_bytes()) as r:
                assert r.status == 200
                assert (await r.json())["NodeNames"] == ["gpu-node-07", "gpu-node-12"]
            async with s.post(f"http://{host}:{port}/bind",
                              data=shared("extender/bind-request.json").read_bytes()) as r:
                # not configured to bind: a logical refusal kube-scheduler can read, not an HTTP error
                assert r.status == 200 and "not configured to bind" in (await r.json())["Error"]
    finally:
        await srv.stop()


def test_extender_settings_from_env(monkeypatch) -> None:
    monkeypatch.setenv("GPUAWARE_PLACEMENT_EXTENDER_PORT", "8888")
    monkeypatch.setenv("GPUAWARE_PLACEMENT_EXTENDER_BIND", "true")
    s = PlacementSettings.from_env()
    assert (s.extender_port, s.extender_bind) == (8888, True)


def test_leader_election_settings(monkeypatch) -> None:
    monkeypatch.setenv("GPUAWARE_PLACEMENT_LEADER_ELECTION", "kubernetes")
    monkeypatch.setenv("GPUAWARE_PLACEMENT_LEASE_NAMESPACE", "gpuaware-system")
    s = PlacementSettings.from_env()
    assert (s.leader_election, s.lease_k8s_namespace(), s.lease_k8s_duration_s) == ("kubernetes", "gpuaware-system", 15)
    assert PlacementSettings().leader_election == "nats"  # the embedded setup keeps the NATS KV lease
