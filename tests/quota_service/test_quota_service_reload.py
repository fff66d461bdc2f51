"""A live reload that fails, for whatever reason, keeps the last good tree and every loop alive: usage
keeps being reported while the bad file is in place, and a good tree restored later is picked up
without a restart. (A tree amount of 2**62 once raised OverflowError inside the report loop and
ended it for good.)"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from quota_service_helpers import World, pending, quota

from gpuaware.services.quota.handlers import QuotaService

GOOD = """
queues:
  - {name: org, guaranteed: {"*": {gpus: 8}}}
  - {name: a1, parent: org, guaranteed: {"*": {gpus: 4}}, limit: {"*": {gpus: 4}}}
"""
HUGE = 'queues: [{name: a1, guaranteed: {"*": {gpus: 4611686018427387904}}}]'


def _replace_later(path: Path, text: str | None) -> None:
    """Put ``text`` at ``path`` (None: a folder, which no reader can read as a file) with a newer mtime."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if text is None:
        path.mkdir()
    else:
        path.write_text(text)
    later = time.time_ns() + 5_000_000_000
    os.utime(path, ns=(later, later))  # a new mtime even on coarse clocks


async def _until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        await asyncio.sleep(0.05)


async def _reports_continue(q: QuotaService) -> None:
    assert q._task is not None and not q._task.done(), "the report loop ended"
    seen = q.reports
    await _until(lambda: q.reports >= seen + 2, "two more usage reports")


async def test_a_failed_reload_keeps_the_last_good_tree_and_the_report_loop(
        world: World, nats_proc, cluster: str, fresh_database_url: str, tmp_path: Path) -> None:
    tree = tmp_path / "q.yaml"
    tree.write_text(GOOD)
    w = world
    async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree), report_interval_s=0.1) as q:
        await _reports_continue(q)
        for text, reason in ((HUGE, "gpus"), (None, "IsADirectoryError")):
            _replace_later(tree, text)
            await _until(lambda r=reason: r in q.last_tree_error, f"the reload refusing the tree ({reason})")
            assert "<= 1099511627776" in q.last_tree_error or text is None
            await _reports_continue(q)  # the loop outlived the failure
            r = await w.admit(pending(cluster, f"p-{reason}", "a1", gpus=5), node="n1")
            assert not r.admitted and "limit 4" in r.reason  # the last good tree answers
        # a good tree restored: picked up by the same loop, no restart
        _replace_later(tree, GOOD.replace('limit: {"*": {gpus: 4}}', 'limit: {"*": {gpus: 8}}'))
        await _until(lambda: q.last_tree_error == "", "the restored tree in force")
        assert (await w.admit(pending(cluster, "p-restored", "a1", gpus=5), node="n1")).admitted
        await _reports_continue(q)
        assert q.view.counts["tree_rejected"] == 2
