"""The permission lists are built from the contract and agree with what the services name."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from gpuaware.devstack import NatsProcess, credentials, start_nats
from gpuaware.schemas import (
    COLLECTOR_STATS,
    FORECASTING_STATS,
    HEALTH_STATS,
    MESSAGES,
    REQUESTS,
    STREAMS,
    base_subject,
    subject_matches,
)
from gpuaware.schemas.permissions import (
    ADMIN,
    BINDER_DURABLE,
    COLLECTOR_DURABLE,
    FORECASTING,
    HEALTH_SCORING,
    IDENTITIES,
    LEASE_BUCKET,
    OPERATIONAL_ENDPOINTS,
    QUOTA_ID,
    QUOTA_LEASE_BUCKET,
    RECORDER_ID,
    SERVICE_IDENTITIES,
    TELEMETRY_COLLECTOR,
    authorization,
    health_cordon_leader,
    health_durable,
    permissions_for,
    placement_durable,
    quota_admit_leader,
    recorder_durable,
    render_server_config,
)
from gpuaware.services.alert_bridge.settings import AlertBridgeSettings
from gpuaware.services.binder.settings import BinderSettings
from gpuaware.services.forecasting.settings import ForecastingSettings
from gpuaware.services.health_scoring.handlers import telemetry_channel
from gpuaware.services.health_scoring.settings import HealthScoringSettings
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.services.quota.settings import QuotaSettings
from gpuaware.services.recorder.handlers import STREAMS_IN
from gpuaware.services.recorder.settings import RecorderSettings
from gpuaware.services.telemetry.handlers import TELEMETRY_IN
from gpuaware.services.telemetry.settings import AgentSettings, CollectorSettings


def test_names_agree_with_the_services_defaults() -> None:
    assert PlacementSettings().durable == placement_durable("default")
    assert PlacementSettings().lease_bucket == LEASE_BUCKET
    assert QuotaSettings().lease_bucket == QUOTA_LEASE_BUCKET
    assert BinderSettings().durable == BINDER_DURABLE
    assert CollectorSettings().durable == COLLECTOR_DURABLE
    assert OPERATIONAL_ENDPOINTS[TELEMETRY_COLLECTOR] == (COLLECTOR_STATS,)
    assert HealthScoringSettings().durable_name() == health_durable("default")
    assert OPERATIONAL_ENDPOINTS[HEALTH_SCORING] == (HEALTH_STATS,)
    health = permissions_for(HEALTH_SCORING)
    for kind in ("sampled", "rolledup"):  # what the health durable reads, it may dead-letter
        concrete = telemetry_channel(HealthScoringSettings(input=kind)).subject.replace(">", "node-a")
        assert any(subject_matches(p, f"deadletter.{concrete}") for p in health.publish), concrete
    assert TELEMETRY_IN.subject in [s for spec in STREAMS for s in spec.subjects]
    # each identity is its service's default name (its NATS micro name)
    assert {s().service_name for s in (PlacementSettings, BinderSettings, AgentSettings, CollectorSettings,
                                       HealthScoringSettings, QuotaSettings, ForecastingSettings, RecorderSettings)} \
        | {AlertBridgeSettings(listen_port=9095).service_name} == set(SERVICE_IDENTITIES)
    assert OPERATIONAL_ENDPOINTS[FORECASTING] == (FORECASTING_STATS,)
    # the recorder: its durable on each stream it reads, and the dead letters of everything those carry
    assert RecorderSettings().durable_name() == recorder_durable("default")
    recorder = permissions_for(RECORDER_ID)
    for stream, channel in STREAMS_IN:
        assert f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{recorder_durable('default')}" in recorder.publish
        concrete = channel.subject.replace(">", "pod.bound.v1")
        assert any(subject_matches(p, f"deadletter.{concrete}") for p in recorder.publish), concrete


@pytest.mark.parametrize("identity", SERVICE_IDENTITIES)
def test_services_publish_only_contract_subjects_and_never_administer(identity: str) -> None:
    perms = permissions_for(identity)
    assert ">" not in perms.publish and ">" not in perms.subscribe
    for subject in perms.publish:
        head = subject.split(".")[0]
        if head in ("$JS", "$KV"):
            assert not any(f".STREAM.{op}." in subject for op in ("DELETE", "PURGE", "UPDATE")), subject
            assert ".STREAM.CREATE." not in subject or ".STREAM.CREATE.KV_" in subject, subject
            continue
        if head == "deadletter":
            continue
        if subject == quota_admit_leader("default"):  # quota.admit, relayed by a standby to its leader
            assert identity == QUOTA_ID, subject
            continue
        if subject == health_cordon_leader("default"):  # health.cordon, relayed by a standby to its leader
            assert identity == HEALTH_SCORING, subject
            continue
        base = base_subject(subject.removesuffix(".>"))
        assert base in MESSAGES or base in REQUESTS, f"{identity} publishes {subject}: not in the contract"
    assert perms.allow_responses


def test_admin_may_do_anything_and_the_config_renders_every_user() -> None:
    assert permissions_for(ADMIN).publish == (">",)
    passwords = {i: f"pw-{i}" for i in IDENTITIES}
    block = authorization(passwords)
    assert [u["user"] for u in block["users"]] == list(IDENTITIES)
    assert json.loads(render_server_config(passwords))["authorization"] == block
    with pytest.raises(ValueError, match="empty password"):
        authorization({ADMIN: ""})
    with pytest.raises(KeyError, match="unknown identity"):
        permissions_for("no-such-service")


def test_devstack_auth_writes_owner_only_credentials_and_keeps_them_across_restarts(tmp_path: Path) -> None:
    import socket

    proc: NatsProcess = start_nats(tmp_path / "nats", auth=True)
    try:
        creds = credentials(proc.data_dir)
        assert set(creds) == set(IDENTITIES) and all(user == i for i, (user, _) in creds.items())
        assert len({pw for _, pw in creds.values()}) == len(IDENTITIES)  # one random password each
        for name in ("credentials.json", "auth.conf"):
            assert stat.S_IMODE((proc.data_dir / name).stat().st_mode) == 0o600
        with socket.create_connection(("127.0.0.1", proc.port), timeout=2) as sock:
            assert b'"auth_required":true' in sock.recv(4096)
        proc = proc.restart()
        assert credentials(proc.data_dir) == creds
        # the server's configuration holds bcrypt hashes only: no password in it, no warning in the log
        conf = (proc.data_dir / "auth.conf").read_text()
        assert not any(pw in conf for _, pw in creds.values()) and conf.count('"$2a$10$') == len(IDENTITIES)
        assert "Plaintext passwords detected" not in (proc.data_dir / "nats-server.log").read_text()
    finally:
        proc.stop()
    # a server started without auth in the same folder leaves no credentials of the earlier one behind
    plain = start_nats(tmp_path / "nats")
    try:
        assert not (plain.data_dir / "credentials.json").exists() and not (plain.data_dir / "auth.conf").exists()
    finally:
        plain.stop()
