"""Bad input: a tree that does not validate stops the service at start with every reason; while it
runs, a changed tree file that does not validate is refused and the running tree stays in force (a
good one replaces it); a request for another cluster is a typed error, not an answer."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import msgspec
import pytest
from quota_service_helpers import World, pending, quota

from gpuaware import bus
from gpuaware.runtime import SettingsError
from gpuaware.services.quota.settings import QuotaSettings

GOOD = """
queues:
  - {name: org, guaranteed: {"*": {gpus: 8}}}
  - {name: a1, parent: org, guaranteed: {"*": {gpus: 4}}, limit: {"*": {gpus: 4}}}
"""
CYCLIC = "queues: [{name: a, parent: b}, {name: b, parent: a}]"
OVERCOMMITTED = """
queues:
  - {name: org, guaranteed: {"*": {gpus: 4}}}
  - {name: a1, parent: org, guaranteed: {"*": {gpus: 6}}}
"""
NEGATIVE = "queues: [{name: a1, limit: {'*': {gpus: -2}}}]"


@pytest.mark.parametrize("text, reason", [(CYCLIC, "cycle: a -> b -> a"), (OVERCOMMITTED, "over-committed"),
                                          (NEGATIVE, "Expected `int` >= 0")])
def test_a_bad_tree_stops_the_service_at_start_with_the_reason(tmp_path: Path, text: str, reason: str) -> None:
    tree = tmp_path / "q.yaml"
    tree.write_text(text)
    with pytest.raises(SettingsError, match="GPUAWARE_QUOTA_TREE") as err:
        QuotaSettings(tree=str(tree))
    assert reason in str(err.value)
    with pytest.raises(SettingsError, match="no file"):
        QuotaSettings(tree=str(tmp_path / "missing.yaml"))
    # from the environment, as the process reads it
    with pytest.raises(SettingsError, match=re.escape(reason)):
        QuotaSettings.from_env({"GPUAWARE_QUOTA_TREE": str(tree)})


def _touch_later(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a new mtime even on coarse clocks


async def test_a_changed_bad_tree_is_refused_and_the_running_tree_stays(
        world: World, nats_proc, cluster: str, fresh_database_url: str, tmp_path: Path) -> None:
    tree = tmp_path / "q.yaml"
    tree.write_text(GOOD)
    w = world
    async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree), report_interval_s=60) as q:
        assert not (await w.admit(pending(cluster, "p1", "a1", gpus=5), node="n1")).admitted  # limit 4
        for text, reason in ((CYCLIC, "cycle"), (OVERCOMMITTED, "over-committed"), (NEGATIVE, ">= 0")):
            _touch_later(tree, text)
            assert q.reload() is False
            assert reason in q.last_tree_error
            # the running tree still answers: a1 exists, its limit is 4
            r = await w.admit(pending(cluster, "p2", "a1", gpus=5), node="n1")
            assert not r.admitted and "limit 4" in r.reason
        assert q.view.counts["tree_rejected"] == 3
        _touch_later(tree, GOOD.replace("limit: {\"*\": {gpus: 4}}", "limit: {\"*\": {gpus: 8}}"))
        assert q.reload() is True and q.last_tree_error == ""
        assert (await w.admit(pending(cluster, "p3", "a1", gpus=5), node="n1")).admitted
        # another cluster's question: a typed service error
        req = msgspec.structs.replace(pending(cluster, "p4", "a1"), cluster="elsewhere")
        from gpuaware.schemas import QUOTA_ADMIT, AdmitReply, AdmitRequest
        with pytest.raises(bus.ServiceError) as err:
            await bus.request(w.nc, QUOTA_ADMIT, AdmitRequest(source="t", emitted_at=time.time(), cluster="elsewhere",
                                                              pod=req), AdmitReply, timeout=5)
        assert err.value.code == 421
