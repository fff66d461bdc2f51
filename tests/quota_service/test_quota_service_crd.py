"""Kubernetes mode: quota's queue tree is the cluster's GPUQueue objects, watched through the official
client from a loopback apiserver (tests/kube_api_fake.py). Creating, changing and deleting a GPUQueue
changes what quota.admit answers and what the usage report lists, without a restart; an invalid one is
told why in its status and changes nothing; after 410 Gone the relist catches up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_api_fake import FakeApiServer
from quota_service_helpers import World, pending, quota
from service_runner import eventually

from gpuaware.runtime import SettingsError
from gpuaware.services.quota.handlers import quota_samples
from gpuaware.services.quota.settings import QuotaSettings

Q = "gpuqueues"


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"name": name, **spec}


def gpus(n: int) -> dict[str, Any]:
    return {"*": {"gpus": n}}


def reported(w: World, queue_name: str) -> bool:
    return bool(w.reports) and any(q.queue == queue_name for q in w.reports[-1].queues)


async def test_gpuqueues_are_the_tree_without_a_restart(world: World, nats_proc: Any, cluster: str,
                                                        fresh_database_url: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    w = world
    with FakeApiServer() as api:
        monkeypatch.setenv("KUBECONFIG", api.kubeconfig(tmp_path))
        api.apply(Q, "GPUQueue", "org", queue("org", guaranteed=gpus(8)))
        api.apply(Q, "GPUQueue", "team-a", queue("team-a", parent="org", limit=gpus(2)))
        async with quota(nats_proc.url, fresh_database_url, cluster, tree_source="crd") as q:
            # the objects listed at start are the tree (quota answered only once it had them)
            r = await w.admit(pending(cluster, "p1", "team-a", gpus=2), node="n1")
            assert (r.admitted, r.queue) == (True, "team-a")
            r = await w.admit(pending(cluster, "p2", "team-a", gpus=1), node="n1")
            assert not r.admitted and "limit" in r.reason
            assert (await w.admit(pending(cluster, "x1", "team-b"))).reason.startswith("queue_unknown")
            await eventually(lambda: (api.accepted(Q, "team-a") or {}).get("status") == "True",
                             what="team-a told it is accepted")
            assert api.accepted(Q, "team-a")["observedGeneration"] == 1  # type: ignore[index]  # set, just checked

            # changed: team-a may hold 4 now
            api.apply(Q, "GPUQueue", "team-a", queue("team-a", parent="org", limit=gpus(4)))
            await eventually(lambda: (api.accepted(Q, "team-a") or {}).get("observedGeneration") == 2,
                             what="team-a generation 2 judged")
            assert (await w.admit(pending(cluster, "p2", "team-a", gpus=1), node="n1")).admitted

            # created: team-b is a queue, and the report lists it
            api.apply(Q, "GPUQueue", "team-b", queue("team-b", parent="org"))
            await eventually(lambda: reported(w, "team-b"), what="team-b in the usage report")
            assert (await w.admit(pending(cluster, "b1", "team-b"), node="n2")).admitted

            # invalid: a guarantee above org's 8 -- refused with the reason, nothing changes
            api.apply(Q, "GPUQueue", "team-a", queue("team-a", parent="org", limit=gpus(4), guaranteed=gpus(12)))
            await eventually(lambda: (api.accepted(Q, "team-a") or {}).get("observedGeneration") == 3,
                             what="team-a generation 3 judged")
            refusal = api.accepted(Q, "team-a")
            assert refusal is not None and (refusal["status"], refusal["reason"]) == ("False", "Invalid")
            assert "org" in refusal["message"] and "generation 2 stays in force" in refusal["message"]
            assert api.get(Q, "team-a")["status"]["observedGeneration"] == 3
            assert [x.value for x in quota_samples(q) if x.name == "gpuaware_quota_queue_objects_refused"] == [1]
            assert q.view.tree.specs["team-a"].limit["*"].gpus == 4  # type: ignore[index]  # team-a has a limit
            r = await w.admit(pending(cluster, "p3", "team-a", gpus=2), node="n1")
            assert not r.admitted and "limit" in r.reason  # 3 held + 2 > 4: generation 2's limit still applies

            # deleted: team-b is gone from the tree and the report
            api.delete(Q, "team-b")
            await eventually(lambda: not reported(w, "team-b") and "team-b" not in q.view.tree.specs,
                             what="team-b gone")
            assert (await w.admit(pending(cluster, "b2", "team-b"))).reason.startswith("queue_unknown")

            # 410 Gone: history compacted while a queue came; the relist brings it
            api.compact()
            api.apply(Q, "GPUQueue", "team-c", queue("team-c", parent="org"))
            await eventually(lambda: "team-c" in q.view.tree.specs, what="team-c after the relist")
            assert q.queues.watcher.relists >= 1
            assert q.view.counts["tree_replaced"] >= 4


def test_crd_mode_and_a_tree_file_are_one_or_the_other(tmp_path: Path) -> None:
    tree = tmp_path / "q.yaml"
    tree.write_text("queues: [{name: a}]\n")
    with pytest.raises(SettingsError, match="TREE_SOURCE is crd"):
        QuotaSettings(tree=str(tree), tree_source="crd")
    with pytest.raises(SettingsError, match=r"tree_source"):
        QuotaSettings.from_env({"GPUAWARE_QUOTA_TREE_SOURCE": "kubernetes"})
