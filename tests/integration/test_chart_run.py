"""``make test-chart-run`` inside ``make test``: the chart's workloads, rendered by Helm, started as
processes against the embedded NATS and PostgreSQL (``chart_run``), replay a short twin workload.

Asserted from the run's summary (also written to ``bench/results/chart-run.json``): the provisioning Job
and every Deployment and DaemonSet pod the chart renders were started, each from its image's module;
every pod that arrived was decided, bound and recorded; the injected GPU fault's alert was raised and
resolved on the bus and fired then resolved in a real Alertmanager (when installed); every dashboard
panel's SQL returned rows. A check the chart cannot support yet (a workload it does not render) is
listed under ``missing`` and left out, never passed silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chart_run import ALERTMANAGER, PROFILE, RESULTS, chart_values, render, run_chart, write_results

from gpuaware.schemas import PROCESSES, process_named


@pytest.mark.slow
@pytest.mark.timeout(280)
async def test_the_chart_runs_as_processes(tmp_path: Path) -> None:
    summary = await run_chart(tmp_path, budget_s=170.0)
    print("\n".join(summary.lines()))
    write_results(summary)
    assert summary.ok, "\n".join(summary.failures)

    started = {p["workload"].removeprefix("gpuaware-"): p for p in summary.processes}
    # the provisioning Job ran first and succeeded, then every Deployment and one agent per GPU node:
    # with this profile the chart deploys every process of the list, each running its image's module
    assert summary.processes[0]["kind"] == "Job" and summary.processes[0]["exit"] == 0
    assert set(started) == {p.name for p in PROCESSES}, sorted(started)
    for p in summary.processes:
        entry = process_named(p["workload"].removeprefix("gpuaware-"))
        assert p["image"] == entry.image and p["argv"][1:] == ["-m", entry.module, *entry.args], p
    assert sum(1 for p in summary.processes if p["kind"] == "DaemonSet") >= 2
    assert all(p["exit"] == 0 for p in summary.processes), "a process did not stop cleanly"

    pods = summary.pods
    assert pods["arrived"] > 0 and pods["decided"] == pods["bound"] == pods["arrived"]
    if "recorder" in started:
        assert pods["recorded"] == pods["arrived"]
    assert summary.alert["bus"] == "raised then resolved"
    if "alert-bridge" in started and ALERTMANAGER is not None:
        assert summary.alert["alertmanager"] == "firing then resolved"
    assert summary.panels and all(p["rows"] for p in summary.panels
                                  if "recorder" in started or "placement_events" not in p["reads"])
    assert RESULTS.is_file()


def test_the_profile_needs_no_kubernetes_api() -> None:
    """The profile switches only what would need the Kubernetes API, through the chart's own values: no
    pod it renders gets a ServiceAccount token, and no RBAC is rendered for it."""
    values = chart_values()
    assert values["placement"]["leaderElection"] == "nats" and values["binder"]["world"] == "twin"
    assert values["placement"]["policySource"] == "settings" and values["quota"]["treeSource"] == "file"
    docs = render(profile=PROFILE)
    pods = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet", "Job")]
    assert pods and all(d["spec"]["template"]["spec"].get("automountServiceAccountToken") is False for d in pods)
    assert not [d["metadata"]["name"] for d in docs if d["kind"].endswith(("Role", "RoleBinding"))]
