"""The list of processes: every NATS identity is one of the list's (and the other way round), each image
runs one module, each entry runs a module that exists with a settings prefix of its own, and what it
consumes and publishes is its NATS permissions' (one source)."""

from __future__ import annotations

import importlib.util

import pytest

from gpuaware.schemas import (
    ADMIN,
    IDENTITIES,
    PROCESSES,
    Consumer,
    login_roles,
    permissions_for,
    process_named,
    processes_by_image,
)


def test_the_identities_are_the_lists() -> None:
    assert set(IDENTITIES) == {ADMIN, *(p.identity for p in PROCESSES)}
    assert len({p.name for p in PROCESSES}) == len(PROCESSES)
    assert len({p.env_prefix for p in PROCESSES}) == len(PROCESSES)


def test_each_entry_runs_a_module_that_exists_one_module_per_image() -> None:
    images = processes_by_image()
    for p in PROCESSES:
        assert images[p.image] == p.module
        assert importlib.util.find_spec(f"{p.module}.__main__") is not None, p.module
    assert sum(p.kind == "Job" for p in PROCESSES) == 1  # the provisioning


def test_consumes_and_publishes_come_from_the_permissions() -> None:
    collector = process_named("telemetry-collector")
    assert Consumer(stream="TELEMETRY", durable="telemetry-collector") in collector.consumes()
    for p in PROCESSES:
        if p.identity == ADMIN:
            continue
        allowed = permissions_for(p.identity, cluster="c1").publish
        assert set(p.publishes("c1")) <= set(allowed), p.name
        assert not any(s.startswith("$JS.") for s in p.publishes("c1")), p.name


def test_login_roles_only_for_processes_with_a_database_role() -> None:
    assert login_roles({"quota": "pw"}) == {"gpuaware_quota_login": ("gpuaware_quota", "pw")}
    for name in ("telemetry-agent", "alert-bridge", "binder"):
        with pytest.raises(KeyError, match="no database role"):
            login_roles({name: "pw"})
    with pytest.raises(KeyError, match="no process"):
        process_named("nope")
