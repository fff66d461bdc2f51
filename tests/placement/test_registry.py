"""Profiles come from configuration; bad configuration is refused with what is known."""

from __future__ import annotations

import pytest
from placement_helpers import node, share

from gpuaware.placement import (
    PUBLISHED,
    Cluster,
    Code,
    Decision,
    GpuFit,
    ResourcesFit,
    Status,
    TypicalPods,
    WholeGpuOnly,
    build_scheduler,
    canonical_policy,
    policy,
)


def test_published_policies_are_registered_in_paper_order() -> None:
    assert PUBLISHED == ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD")


@pytest.mark.parametrize("spelling, canonical", [("fgd", "FGD"), ("BESTFIT", "BestFit"), (" gpupacking ", "GpuPacking")])
def test_policy_names_are_case_insensitive(spelling: str, canonical: str) -> None:
    assert canonical_policy(spelling) == canonical


def test_unknown_policy_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="known: Random, DotProd"):
        canonical_policy("tetris")


def test_weighted_profile_from_config() -> None:
    # 3 x gpupacking + 1 x bestfit; an idle 2-GPU node vs one with a partly used GPU (300 free):
    # packing: idle 31, used 97; bestfit (normalised over two nodes): the fuller node 100, the other 0
    config = {"name": "mix", "score": [{"name": "gpupacking", "weight": 3}, {"name": "bestfit", "weight": 1}],
              "gpu": "best"}
    sched = build_scheduler(config)
    c = Cluster([node("idle"), node("used")])
    c.reserve(share("x", milli=700), 1, (0,))
    d = sched.schedule(share("p", milli=200), c.snapshot())
    assert isinstance(d, Decision)
    assert (d.node_name, d.gpus, d.score) == ("used", (0,), 3 * 97 + 100)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"score": []}, "at least one score plugin"),
        ({"score": [{"name": "nope"}]}, "unknown score plugin 'nope'"),
        ({"score": [{"name": "bestfit", "weight": 0}]}, "positive integer"),
        ({"score": [{"name": "bestfit", "weight": 1.5}]}, "positive integer"),
        ({"score": [{"name": "bestfit"}], "gpu": "worst"}, "unknown GPU selector"),
        ({"score": [{"name": "fgd"}]}, "needs typical pods"),
        ({"filter": [{"name": "nope"}], "score": [{"name": "bestfit"}]},
         "unknown filter plugin 'nope'; known: gpu-fit, resources-fit, whole-gpu-only"),
        ({"filter": ["gpu-fit"], "score": [{"name": "bestfit"}]}, "unknown filter plugin None"),
        ({"filter": [], "score": [{"name": "bestfit"}]}, "non-empty list"),
        ({"filter": {"name": "gpu-fit"}, "score": [{"name": "bestfit"}]}, "non-empty list"),
        ({"score": [{"name": "bestfit"}], "gpu": "signal-aware", "gpu_args": {"inner": "signal-aware"}},
         "unknown inner GPU selector"),
    ],
)
def test_bad_profiles_are_refused(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_scheduler(config)


def test_policy_factory_passes_typical_pods() -> None:
    typical = TypicalPods.from_counts({(1000, 1, 500, ""): 1})
    assert policy("fgd", typical=typical).name == "FGD"


@pytest.mark.parametrize("filters, expected", [
    (None, [ResourcesFit, GpuFit]),  # absent: kube-scheduler's pair
    ([{"name": "resources-fit"}, {"name": "gpu-fit"}, {"name": "whole-gpu-only"}], [ResourcesFit, GpuFit, WholeGpuOnly]),
    ([{"name": "gpu-fit"}], [GpuFit]),  # the list is the whole list, in order
])
def test_profiles_list_their_filters(filters: list | None, expected: list[type]) -> None:
    config: dict = {"score": [{"name": "gpupacking"}], "gpu": "best"}
    if filters is not None:
        config["filter"] = filters
    assert [type(f) for f in build_scheduler(config).filters] == expected


def test_whole_gpu_only_keeps_a_fraction_off_shared_gpus() -> None:
    # both nodes have 300 milli free on GPU 0; "idle2" also has a whole GPU: only it passes the filter
    c = Cluster([node("used"), node("idle2")])
    c.reserve(share("x", milli=700), 0, (0,))
    c.reserve(share("y", milli=1000), 0, (1,))
    c.reserve(share("z", milli=700), 1, (0,))
    base = {"score": [{"name": "gpupacking"}], "gpu": "best"}
    shared = build_scheduler(base).schedule(share("p", milli=200), c.snapshot())
    assert isinstance(shared, Decision) and shared.node_name == "used"  # packing onto the 300-milli gap
    whole_only = build_scheduler({**base, "filter": [{"name": "resources-fit"}, {"name": "gpu-fit"},
                                                     {"name": "whole-gpu-only"}]})
    d = whole_only.schedule(share("p", milli=200), c.snapshot())
    assert isinstance(d, Decision) and (d.node_name, d.feasible) == ("idle2", 1)
    c.reserve(share("w", milli=1000), 1, (1,))
    s = whole_only.schedule(share("p", milli=200), c.snapshot())
    assert isinstance(s, Status) and s.code == Code.UNSCHEDULABLE
