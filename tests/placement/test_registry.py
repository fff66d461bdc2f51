"""Profiles come from configuration; bad configuration is refused with what is known."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
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
from gpuaware.placement import registry as registry_module
from gpuaware.placement.args import NoArgs, SignalAwareArgs, WasteGradientArgs
from gpuaware.placement.builtin import POLICIES, REGISTRY
from gpuaware.placement.profiles import DEFAULT_PROFILE, OURS
from gpuaware.placement.registry import Kind, Plugin, PluginSet, ProfileError, Registry
from gpuaware.placement.stock import KUBE_DEFAULT, FirstFitScore, WholeGpu
from gpuaware.runtime import SettingsError
from gpuaware.services.placement.settings import PlacementSettings


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
        ({"score": []}, "Expected `array` of length >= 1 - at `$.score`"),
        ({"score": [{"name": "nope"}]}, "unknown score plugin 'nope'; known: bestfit, dotprod, fgd, "),
        ({"score": [{"name": "bestfit", "weight": 0}]}, "Expected `int` >= 1 - at `$.score[0].weight`"),
        ({"score": [{"name": "bestfit", "weight": 1.5}]}, "Expected `int`, got `float` - at `$.score[0].weight`"),
        ({"score": [{"name": "bestfit", "weight": True}]}, "Expected `int`, got `bool` - at `$.score[0].weight`"),
        ({"score": [{"name": "bestfit"}], "gpu": "worst"}, "unknown GPU selector 'worst'"),
        ({"score": [{"name": "fgd"}]}, "needs typical pods"),  # the only failure left to build time
        ({"filter": [{"name": "nope"}], "score": [{"name": "bestfit"}]},
         "unknown filter plugin 'nope'; known: gpu-fit, gpu-node-cpu-reserve, resources-fit, whole-gpu-only - at `$.filter[0].name`"),
        ({"filter": ["gpu-fit"], "score": [{"name": "bestfit"}]}, "Expected `object`, got `str` - at `$.filter[0]`"),
        ({"filter": [], "score": [{"name": "bestfit"}]}, "Expected `array` of length >= 1 - at `$.filter`"),
        ({"filter": {"name": "gpu-fit"}, "score": [{"name": "bestfit"}]},
         "Expected `array | null`, got `object` - at `$.filter`"),
        ({"score": [{"name": "bestfit"}], "gpu": "signal-aware", "gpu_args": {"inner": "signal-aware"}},
         "unknown inner GPU selector 'signal-aware'; known: best, fgd, fgd-float, random, waste-gradient, "
         "whole-gpu - at `$.gpu_args.inner`"),
        ({"score": [{"name": "bestfit"}], "scores": []}, "Object contains unknown field `scores`"),
    ],
)
def test_bad_profiles_are_refused(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
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


# -- the closed registry: validated before anything is built -------------------------------------------


@pytest.mark.parametrize("config, kind, name", [
    ({"filter": [{"name": "gpu-fits"}], "score": [{"name": "bestfit"}]}, Kind.FILTER, "gpu-fits"),
    ({"score": [{"name": "bestfit"}, {"name": "best-fit"}]}, Kind.SCORE, "best-fit"),
    ({"score": [{"name": "bestfit"}], "gpu": "bestfit"}, Kind.GPU, "bestfit"),
])
def test_unknown_names_are_refused_with_the_known_ones(config: dict, kind: Kind, name: str) -> None:
    with pytest.raises(ProfileError) as info:
        REGISTRY.validate(config)
    known = ", ".join(REGISTRY.names(kind))
    assert f"unknown {kind.noun} {name!r}; known: {known}" in str(info.value)


@pytest.mark.parametrize("config, message", [
    # a string where a float goes: the path runs through the entry into its args
    ({"score": [{"name": "waste-gradient", "weight": 1000, "args": {"strand": "2.0"}}]},
     "score plugin 'waste-gradient': Expected `float`, got `str` - at `$.score[0].args.strand`"),
    # constraints of the args Struct, checked at validation instead of in the plugin's constructor
    ({"score": [{"name": "bestfit"}, {"name": "waste-gradient", "args": {"kappa": 0}}]},
     "Expected `float` > 0.0 - at `$.score[1].args.kappa`"),
    ({"score": [{"name": "bestfit"}], "gpu": "signal-aware", "gpu_args": {"tolerance": -1}},
     "GPU selector 'signal-aware': Expected `float` >= 0.0 - at `$.gpu_args.tolerance`"),
    ({"score": [{"name": "throughput", "args": {"matrix": {"resnet": {"A100": "fast"}}}}]},
     "Expected `float`, got `str` - at `$.score[0].args.matrix[...][...]`"),
    ({"score": [{"name": "bestfit", "args": []}]}, "Expected `object`, got `array` - at `$.score[0].args`"),
])
def test_bad_arguments_are_refused_naming_the_path(config: dict, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)):
        REGISTRY.validate(config)


@pytest.mark.parametrize("config, message", [
    # a typo in an argument name is not silently ignored
    ({"score": [{"name": "waste-gradient", "args": {"stand": 2.0}}]},
     "score plugin 'waste-gradient': Object contains unknown field `stand` - at `$.score[0].args`"),
    # a plugin without arguments takes none
    ({"score": [{"name": "bestfit", "args": {"weight": 3}}]},
     "score plugin 'bestfit': Object contains unknown field `weight` - at `$.score[0].args`"),
    ({"filter": [{"name": "gpu-fit", "args": {"x": 1}}], "score": [{"name": "bestfit"}]},
     "filter plugin 'gpu-fit': Object contains unknown field `x` - at `$.filter[0].args`"),
    ({"score": [{"name": "bestfit"}], "gpu": "best", "gpu_args": {"inner": "fgd"}},
     "GPU selector 'best': Object contains unknown field `inner` - at `$.gpu_args`"),
    # and an unknown key of an entry or of the profile itself
    ({"score": [{"name": "bestfit", "wieght": 3}]}, "Object contains unknown field `wieght` - at `$.score[0]`"),
])
def test_unknown_argument_keys_are_refused(config: dict, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)):
        REGISTRY.validate(config)


def test_arguments_reach_the_plugin_typed() -> None:
    # ints in JSON become the Struct's floats; omitted fields take the Struct's defaults
    resolved = REGISTRY.resolve({"score": [{"name": "waste-gradient", "args": {"strand": 1, "gap": 0}}],
                                 "gpu": "signal-aware", "gpu_args": {"inner": "waste-gradient"}})
    (bound, weight), = resolved.scores
    assert (bound.args, weight) == (WasteGradientArgs(strand=1.0, gap=0.0, kappa=30.0), 1)
    assert resolved.gpu.args == SignalAwareArgs(inner="waste-gradient", tolerance=25.0)
    typical = TypicalPods.from_counts({(1000, 1, 500, ""): 1})
    sched = build_scheduler({"score": [{"name": "waste-gradient", "args": {"strand": 1, "gap": 0}}],
                             "gpu": "waste-gradient"}, typical=typical)
    score = sched.scores[0].plugin
    assert (score.strand_weight, score.gap_weight) == (1.0, 0.0)


def test_every_builtin_policy_is_valid_and_kube_default_is_one_of_them() -> None:
    for name, config in POLICIES.items():
        assert REGISTRY.validate(config).score, name
    assert KUBE_DEFAULT in POLICIES and canonical_policy("kubedefault") == KUBE_DEFAULT
    assert REGISTRY.resolve(POLICIES[OURS]).scores[0][0].args == WasteGradientArgs(strand=2.0, gap=4.0, kappa=30.0)
    kube = policy(KUBE_DEFAULT)
    assert (type(kube.scores[0].plugin), type(kube.gpu_selector)) == (FirstFitScore, WholeGpu)


def test_kube_default_resolves_in_a_fresh_interpreter_importing_only_the_settings() -> None:
    # nothing imports gpuaware.placement.stock for its side effects any more: the settings module alone
    # knows the policy, and the profile it hands the service builds the stock plugins
    code = textwrap.dedent("""
        from gpuaware.services.placement.settings import PlacementSettings
        s = PlacementSettings(policy="KubeDefault")
        print(s.policy_name, s.policy_config)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAWARE_PLACEMENT_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == (
        "KubeDefault {'filter': [{'name': 'resources-fit'}, {'name': 'gpu-fit'}, {'name': 'whole-gpu-only'}], "
        "'score': [{'name': 'first-fit', 'weight': 1}], 'gpu': 'whole-gpu'}")


def test_the_registry_cannot_be_changed_at_runtime() -> None:
    # every write below is one the type checker refuses too (the ignores): the test shows it fails at runtime
    with pytest.raises(dataclasses.FrozenInstanceError):
        REGISTRY.plugins = {}  # type: ignore[misc]  # the write the test expects to fail
    with pytest.raises(TypeError):
        REGISTRY.plugins[Kind.SCORE]["mine"] = Plugin(lambda ctx, a: FirstFitScore())  # type: ignore[index]  # the write the test expects to fail
    with pytest.raises(TypeError):
        POLICIES["Mine"] = {"score": [{"name": "bestfit"}]}  # type: ignore[index]  # the write the test expects to fail
    with pytest.raises(TypeError):
        POLICIES["FGD"]["gpu"] = "best"  # type: ignore[index]  # the write the test expects to fail
    with pytest.raises(TypeError):
        POLICIES[DEFAULT_PROFILE]["score"][0]["weight"] = 1  # type: ignore[index]  # the write the test expects to fail
    with pytest.raises(AttributeError):
        POLICIES[DEFAULT_PROFILE]["score"].append({"name": "bestfit"})  # type: ignore[attr-defined]  # the write the test expects to fail
    assert not [n for n in dir(registry_module) if n.startswith("register_")]
    # a caller wanting to edit a profile gets its own plain copy
    mine = REGISTRY.policy_config("fgd")
    mine["gpu"] = "best"
    assert POLICIES["FGD"]["gpu"] == "fgd" and mine == {"score": [{"name": "fgd", "weight": 1000}], "gpu": "best"}


def test_extending_makes_a_new_registry_and_refuses_a_second_definition() -> None:
    extra = PluginSet("tests", {Kind.SCORE: {"first-fit-again": Plugin(lambda ctx, a: FirstFitScore())}},
                      {"Mine": {"score": [{"name": "first-fit-again"}], "gpu": "whole-gpu"}})
    bigger = REGISTRY.extend(extra)
    assert bigger.canonical_policy("mine") == "Mine" and "first-fit-again" in bigger.names(Kind.SCORE)
    assert "first-fit-again" not in REGISTRY.names(Kind.SCORE) and "Mine" not in POLICIES
    assert build_scheduler(POLICIES["FGD"], registry=bigger, typical=TypicalPods.from_counts({(1000, 1, 500, ""): 1}))
    with pytest.raises(ProfileError, match="score plugin 'bestfit' is defined by both"):
        REGISTRY.extend(PluginSet("tests", {Kind.SCORE: {"bestfit": Plugin(lambda ctx, a: FirstFitScore())}}))
    with pytest.raises(ProfileError, match="policy 'fgd' of tests clashes with 'FGD'"):
        REGISTRY.extend(PluginSet("tests", policies={"fgd": {"score": [{"name": "bestfit"}]}}))
    # a policy naming a plugin nobody registered is refused when the registry is built
    with pytest.raises(ProfileError, match=re.escape("policy 'Bad' (tests): unknown score plugin 'nope'")):
        Registry.of(PluginSet("tests", policies={"Bad": {"score": [{"name": "nope"}]}}))


def test_entry_points_are_loaded_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a plugin package as pip would install it: its module and a dist-info naming the entry point
    (tmp_path / "gpuaware_test_plugin.py").write_text(textwrap.dedent("""
        from gpuaware.placement import Kind, Plugin, PluginSet
        from gpuaware.placement.policies import BestFitScore

        PLUGINS = PluginSet("gpuaware-test-plugin", {Kind.SCORE: {"tight": Plugin(lambda ctx, a: BestFitScore())}},
                            {"Tight": {"score": [{"name": "tight", "weight": 1000}], "gpu": "best"}})
    """))
    dist = tmp_path / "gpuaware_test_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuaware-test-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gpuaware.placement.plugins]\ntight = gpuaware_test_plugin:PLUGINS\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "Tight" not in POLICIES  # installed is not loaded: nothing happens at import
    loaded = REGISTRY.with_entry_points()
    assert "gpuaware-test-plugin" in loaded.sources and "tight" in loaded.names(Kind.SCORE)
    assert policy("tight", registry=loaded).name == "Tight"
    assert "Tight" not in POLICIES


@pytest.mark.parametrize("profile, message", [
    ({"score": [{"name": "bestfit", "weight": "3"}]}, "Expected `int`, got `str` - at `$.score[0].weight`"),
    ({"score": [{"name": "fgd-floats"}]}, "unknown score plugin 'fgd-floats'; known: bestfit, "),
    ({"score": [{"name": "fgd"}], "gpu": "signal-aware", "gpu_args": {"tolerence": 10}},
     "Object contains unknown field `tolerence` - at `$.gpu_args`"),
])
def test_settings_refuse_a_bad_profile_naming_the_field(profile: dict, message: str) -> None:
    env = {"GPUAWARE_PLACEMENT_PROFILE": json.dumps(profile)}
    with pytest.raises(SettingsError, match=re.escape("GPUAWARE_PLACEMENT_PROFILE: ") + ".*" + re.escape(message)):
        PlacementSettings.from_env(env)


def test_settings_accept_a_good_profile_and_every_policy() -> None:
    profile = {"score": [{"name": "fgd", "weight": 1000}, {"name": "health", "weight": 32}], "gpu": "fgd"}
    s = PlacementSettings.from_env({"GPUAWARE_PLACEMENT_PROFILE": json.dumps(profile)})
    assert (s.policy_name, s.policy_config) == ("custom", profile)
    for name in POLICIES:
        assert PlacementSettings.from_env({"GPUAWARE_PLACEMENT_POLICY": name.lower()}).policy_name == name
    with pytest.raises(SettingsError, match="unknown policy 'tetris'; known: Random, DotProd"):
        PlacementSettings.from_env({"GPUAWARE_PLACEMENT_POLICY": "tetris"})


def test_args_structs_are_frozen_and_default_to_empty() -> None:
    assert msgspec.convert({}, NoArgs) == NoArgs()
    with pytest.raises(AttributeError):
        WasteGradientArgs().strand = 1.0  # type: ignore[misc]  # the write the test expects to fail


# -- the other extension points: permit, post_filter ------------------------------------------------


def test_post_filter_plugins_are_validated_like_the_others() -> None:
    base = {"score": [{"name": "bestfit"}]}
    with pytest.raises(ProfileError, match=r"unknown post-filter plugin 'preempt'.*default-preemption.*\$\.post_filter\[0\]\.name"):
        REGISTRY.validate({**base, "post_filter": [{"name": "preempt"}]})
    with pytest.raises(ProfileError, match=r"Expected `int`, got `str` - at `\$\.post_filter\[0\]\.args\.max_victims`"):
        REGISTRY.validate({**base, "post_filter": [{"name": "default-preemption", "args": {"max_victims": "2"}}]})
    with pytest.raises(ProfileError, match="unknown permit plugin 'quota'"):
        REGISTRY.validate({**base, "permit": [{"name": "quota"}]})


@pytest.mark.parametrize("point", ["pre_filter", "reserve"])
def test_a_profile_naming_an_extension_point_the_session_does_not_run_is_refused(point: str) -> None:
    with pytest.raises(ProfileError, match=f"unknown field `{point}`"):
        REGISTRY.validate({"score": [{"name": "bestfit"}], point: []})


def test_build_framework_adds_the_default_preemption_only_where_the_profile_names_none() -> None:
    default = {"name": "default-preemption", "args": {"max_victims": 3, "cooldown_s": 0}}
    fw = REGISTRY.build_framework({"score": [{"name": "bestfit"}]}, default_post_filter=default)
    (pf,) = fw.post_filters
    assert pf.name == "default-preemption" and pf.max_victims == 3 and pf.cooldown_s == 0
    none = REGISTRY.build_framework({"score": [{"name": "bestfit"}], "post_filter": []}, default_post_filter=default)
    assert none.post_filters == ()
    own = REGISTRY.build_framework({"score": [{"name": "bestfit"}], "post_filter": [
        {"name": "default-preemption", "args": {"max_victims": 7}}]}, default_post_filter=default)
    assert own.post_filters[0].max_victims == 7


def test_a_plugins_memory_outlives_a_rebuilt_framework() -> None:
    memory: dict = {}
    t = [100.0]
    entry = {"name": "default-preemption", "args": {"cooldown_s": 30}}
    first = REGISTRY.build_framework({"score": [{"name": "bestfit"}]}, default_post_filter=entry,
                                     clock=lambda: t[0], memory=memory)
    first.post_filters[0]._planned_at["p"] = 90.0
    again = REGISTRY.build_framework({"score": [{"name": "bestfit"}]}, default_post_filter=entry,
                                     clock=lambda: t[0], memory=memory)
    assert again.post_filters[0]._planned_at == {"p": 90.0}  # the cooldown is still running after a rebuild


def test_every_waste_gradient_keyword_can_be_set_from_a_profile() -> None:
    import inspect

    from gpuaware.placement.args import WasteGradientArgs
    from gpuaware.placement.waste import WasteGradientScore

    keywords = [p for p in inspect.signature(WasteGradientScore).parameters if p != "typical"]
    assert sorted(WasteGradientArgs.__struct_fields__) == sorted(keywords)
    sched = REGISTRY.build({"score": [{"name": "waste-gradient", "args": {"reserve_cost": 1.5, "capability": 0}}],
                            "gpu": "waste-gradient"}, typical=TypicalPods.from_counts({(1000, 1, 500, ""): 1.0}))
    assert sched.scores[0].plugin.reserve_cost == 1.5
