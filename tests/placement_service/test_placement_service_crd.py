"""Kubernetes mode: placement's profile is the GPUPolicy it follows, watched through the official client
from a loopback apiserver (tests/kube_api_fake.py). Creating, changing and deleting it changes how the
next pod is decided, without a restart; an invalid generation is told why in its status and changes
nothing; another GPUPolicy is judged too but not followed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_api_fake import FakeApiServer
from placement_service_helpers import World, pending, placement

from gpuaware.services.placement.metrics import placement_samples

P = "gpupolicies"
FGD = {"score": [{"name": "fgd", "weight": 1000}], "gpu": "fgd"}
BESTFIT = {"score": [{"name": "bestfit", "weight": 1000}], "gpu": "best"}


def scores(svc: Any) -> list[str]:
    return [e["name"] for e in svc.state.planner.config.policy_config["score"]]


async def test_the_followed_gpupolicy_is_the_profile_without_a_restart(world: World, nats_proc: Any, cluster: str,
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    w = world
    with FakeApiServer() as api:
        monkeypatch.setenv("KUBECONFIG", api.kubeconfig(tmp_path))
        api.apply(P, "GPUPolicy", "default", FGD)
        api.apply(P, "GPUPolicy", "other", {"score": [{"name": "nope", "weight": 1}]})
        await w.nodes(["n1", "n2"])
        async with placement(nats_proc.url, cluster, policy_source="crd") as svc:
            # listed before the first decision: the followed object is the profile
            assert scores(svc) == ["fgd"]
            await w.pend(pending(cluster, "a"))
            await w.wait(lambda: w.decision_for("a") is not None, what="a decided")
            assert w.decision_for("a").policy == "GPUPolicy/default"  # type: ignore[union-attr]  # decided
            await w.wait(lambda: (api.accepted(P, "default") or {}).get("status") == "True", what="default accepted")
            other = api.accepted(P, "other")
            assert other is not None and other["status"] == "False" and "nope" in other["message"]
            refused = [x for x in placement_samples(svc) if x.name == "gpuaware_placement_policy_objects_refused"]
            assert [x.value for x in refused] == [1]

            # changed: the next pod is decided by generation 2
            api.apply(P, "GPUPolicy", "default", BESTFIT)
            await w.wait(lambda: scores(svc) == ["bestfit"], what="generation 2 in force")
            assert api.accepted(P, "default") is not None

            # invalid: refused in its status, generation 2 stays in force
            api.apply(P, "GPUPolicy", "default", {"score": [{"name": "bestfit", "weight": 1000}], "gpu": "no-such"})
            await w.wait(lambda: (api.accepted(P, "default") or {}).get("observedGeneration") == 3,
                         what="generation 3 judged")
            refusal = api.accepted(P, "default")
            assert refusal is not None and (refusal["status"], refusal["reason"]) == ("False", "Invalid")
            assert "no-such" in refusal["message"] and "generation 2 stays in force" in refusal["message"]
            assert scores(svc) == ["bestfit"]
            await w.pend(pending(cluster, "b"))
            await w.wait(lambda: w.decision_for("b") is not None, what="b decided")

            # deleted: the settings' policy decides again
            api.delete(P, "default")
            await w.wait(lambda: svc.state.policy_name == svc.settings.policy_name, what="back to the settings' policy")
            await w.pend(pending(cluster, "c"))
            await w.wait(lambda: w.decision_for("c") is not None, what="c decided")
            assert w.decision_for("c").policy == svc.settings.policy_name  # type: ignore[union-attr]  # decided
