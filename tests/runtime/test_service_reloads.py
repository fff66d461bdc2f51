"""Per service that reloads configuration while it runs: a reload raising an arbitrary exception (not a
validation error) keeps the last good configuration, raises a ``config_reload_failed`` alert and leaves
the reloading loop alive; the next good reload resolves the alert.

Quota (its tree file, and a GPUQueue tree from the watch), placement (a GPUPolicy profile from the watch)
and forecasting (its model registry), each running in this process against real servers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
from service_runner import in_process, placement_settings, quiet_settings

from gpuaware import bus
from gpuaware.runtime import RELOAD_RULE
from gpuaware.schemas import AlertRaised, AlertResolved

CEILING = 30.0
TREE = """
queues:
  - {name: org, guaranteed: {"*": {gpus: 8}}}
  - {name: a1, parent: org, guaranteed: {"*": {gpus: 4}}}
"""


async def _until(check: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + CEILING
    while not check():
        assert time.monotonic() < deadline, f"not reached within {CEILING:g} s: {what}"
        await asyncio.sleep(0.02)


class Alerts:
    """The reload alerts (raised and resolved) published for one cluster."""

    def __init__(self) -> None:
        self.got: list[AlertRaised | AlertResolved] = []

    def kinds(self) -> list[str]:
        return ["raised" if isinstance(e, AlertRaised) else "resolved" for e in self.got]


@contextlib.asynccontextmanager
async def watching_alerts(url: str, cluster: str) -> AsyncIterator[Alerts]:
    alerts = Alerts()

    async def on(msg: Any) -> None:
        ev = msgspec.json.decode(msg.data, type=AlertRaised | AlertResolved)
        if ev.rule == RELOAD_RULE:
            alerts.got.append(ev)

    async with bus.connected(url, name="reload-alerts") as nc:
        await nc.subscribe(f"alerts.gpu.*.v1.{cluster}.>", cb=on)
        await nc.subscribe(f"alerts.gpu.*.v1.{cluster}", cb=on)
        await nc.flush()
        yield alerts


def _touch_later(path: Path, text: str) -> None:
    path.write_text(text)
    later = time.time_ns() + 5_000_000_000
    os.utime(path, ns=(later, later))  # a new mtime even on coarse clocks


async def test_quota_tree_reload_raising_anything(nats_proc: Any, fresh_database_url: str, tmp_path: Path,
                                                  monkeypatch: Any) -> None:
    from gpuaware.quota import validate
    from gpuaware.services.quota import handlers
    from gpuaware.services.quota.settings import QuotaSettings

    cluster = "reload-quota"
    tree = tmp_path / "tree.yaml"
    tree.write_text(TREE)
    settings = quiet_settings(QuotaSettings, nats_url=nats_proc.url, database_url=fresh_database_url,
                              cluster=cluster, instance_id="q1", report_interval_s=0.1, tree=str(tree))
    async with (watching_alerts(nats_proc.url, cluster) as alerts,
                in_process(settings, handlers.mounter, what="quota") as q):
        good = set(q.view.tree.specs)
        boom = RuntimeError("replace_tree blew up")

        def broken(_tree: Any) -> int:
            raise boom

        real_replace = q.view.replace_tree
        monkeypatch.setattr(q.view, "replace_tree", broken)
        _touch_later(tree, TREE.replace("gpus: 4", "gpus: 6"))  # the file reload: any exception
        await _until(lambda: q.tree_alarm.failing, "the file reload failing")
        q.use_tree(validate(TREE))  # the GPUQueue watch's hand-over: no exception escapes it either
        assert q.tree_alarm.failures == 2 and "replace_tree blew up" in q.tree_alarm.last_error
        assert set(q.view.tree.specs) == good
        reports = q.reports
        await _until(lambda: q.reports >= reports + 2, "usage reports going on")  # the report loop lives
        assert q._task is not None and not q._task.done()
        await _until(lambda: alerts.kinds()[:1] == ["raised"], "the reload alert")
        raised = alerts.got[0]
        assert raised.labels["config"] == "quota tree" and "replace_tree blew up" in raised.summary

        monkeypatch.setattr(q.view, "replace_tree", real_replace)
        _touch_later(tree, TREE)
        await _until(lambda: not q.tree_alarm.failing, "the good tree in force again")
        await _until(lambda: "resolved" in alerts.kinds(), "the alert resolved")
        assert {s.name: s.value for s in q.tree_alarm.samples()} == {
            "gpuaware_config_reload_failures": 2.0, "gpuaware_config_reload_failing": 0.0}


async def test_placement_policy_reload_raising_anything(nats_proc: Any, monkeypatch: Any) -> None:
    from gpuaware.services.placement.handlers import mounter

    cluster = "reload-placement"
    async with (watching_alerts(nats_proc.url, cluster) as alerts,
                in_process(placement_settings(nats_proc.url, cluster), mounter, what="placement") as p):
        before = p.state.policy_name
        real_use = p.state.use_policy

        def broken(name: str, config: Any) -> None:
            if name.startswith("GPUPolicy/"):
                raise KeyError("a plugin this build lacks")
            real_use(name, config)

        monkeypatch.setattr(p.state, "use_policy", broken)
        p.use_profile({"score": [{"name": "binpack", "weight": 1}]})  # what the GPUPolicy watch calls
        assert p.state.policy_name == before  # the last good one stays in force
        assert p.policy_alarm.failing and "KeyError" in p.policy_alarm.last_error
        assert p._report_task is not None and not p._report_task.done()
        await _until(lambda: alerts.kinds()[:1] == ["raised"], "the reload alert")
        assert alerts.got[0].labels["config"] == "placement policy"

        monkeypatch.setattr(p.state, "use_policy", real_use)
        p.use_profile(None)  # the settings' policy: applies
        assert not p.policy_alarm.failing
        await _until(lambda: "resolved" in alerts.kinds(), "the alert resolved")


async def test_forecasting_registry_reload_raising_anything(nats_proc: Any, fresh_database_url: str,
                                                            monkeypatch: Any) -> None:
    from gpuaware.services.forecasting.handlers import mounter
    from gpuaware.services.forecasting.settings import ForecastingSettings

    cluster = "reload-forecasting"
    settings = quiet_settings(ForecastingSettings, nats_url=nats_proc.url, database_url=fresh_database_url,
                              cluster=cluster, instance_id="f1", reload_s=0.05)
    async with (watching_alerts(nats_proc.url, cluster) as alerts,
                in_process(settings, mounter, what="forecasting") as f):
        served = (f.server.model_label, f.versions)
        real_reload = f.reload
        calls = 0

        async def broken() -> bool:
            nonlocal calls
            calls += 1
            raise ZeroDivisionError("not a registry error at all")

        monkeypatch.setattr(f, "reload", broken)
        await _until(lambda: calls >= 3, "three failed polls")  # the reload loop keeps polling
        assert f.model_alarm.failing and "ZeroDivisionError" in f.model_alarm.last_error
        assert (f.server.model_label, f.versions) == served
        assert f._reloader is not None and not f._reloader.done()
        await _until(lambda: "raised" in alerts.kinds(), "the reload alert")
        assert next(e for e in alerts.got if isinstance(e, AlertRaised)).labels["config"] == "model registry"

        monkeypatch.setattr(f, "reload", real_reload)
        await _until(lambda: not f.model_alarm.failing, "a poll that works")
        await _until(lambda: "resolved" in alerts.kinds(), "the alert resolved")
