"""The queue tree file and its validator: every bad input refused with its reason."""

from __future__ import annotations

import datetime as dt

import pytest

from gpuaware.quota import QuotaConfigError, load_config, validate

GOOD = """
default_queue: misc
capacity: {"*": {gpus: 16, gpu_milli: 16000}}
queues:
  - {name: org, guaranteed: {"*": {gpus: 16}}}
  - {name: research, parent: org, guaranteed: {"*": {gpus: 8}},
     windows: [{start: "20:00", end: "06:00", guaranteed: {"*": {gpus: 12}}}]}
  - {name: clinical, parent: org, guaranteed: {"*": {gpus: 4}, "A100": {gpus: 2}}}
  - {name: misc, parent: research}
  - {name: genomics, parent: clinical, limit: {"*": {gpus: 6}}}
partitions:
  - {name: clin, nodes: [n7], queues: [clinical]}
"""


def test_good_tree_loads_with_tenants_and_windows():
    tree = validate(GOOD)
    assert tree.leaves == {"misc", "genomics"}
    assert tree.tenant["genomics"] == "clinical"  # the ancestor just below the root
    assert tree.ancestors("misc") == ("misc", "research", "org")
    noon = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC).timestamp()
    night = dt.datetime(2024, 1, 1, 23, tzinfo=dt.UTC).timestamp()
    early = dt.datetime(2024, 1, 2, 3, tzinfo=dt.UTC).timestamp()
    assert tree.guaranteed("research", t=noon)[0] == 8
    assert tree.guaranteed("research", t=night)[0] == 12
    assert tree.guaranteed("research", t=early)[0] == 12  # wraps past midnight
    assert tree.limit("genomics")[0] == 6
    assert tree.guaranteed("clinical", "A100")[0] == 2


@pytest.mark.parametrize("text, reason", [
    # a -> b -> a
    ("queues: [{name: a, parent: b}, {name: b, parent: a}]", "cycle"),
    ("queues: [{name: a, parent: zz}]", "unknown parent"),
    # children 6 + 6 > parent 10
    ("queues: [{name: p, guaranteed: {'*': {gpus: 10}}}, {name: a, parent: p, guaranteed: {'*': {gpus: 6}}},"
     " {name: b, parent: p, guaranteed: {'*': {gpus: 6}}}]", "over-committed, children guaranteed gpus[*] 12 > its own 10"),
    ("queues: [{name: a, guaranteed: {'*': {gpus: -1}}}]", "Expected `int` >= 0"),
    ("queues: [{name: a, guaranteed: {'*': {gpus: 4}}, limit: {'*': {gpus: 2}}}]", "above its limit"),
    # root guarantees 20 > capacity 16
    ("capacity: {'*': {gpus: 16}}\nqueues: [{name: a, guaranteed: {'*': {gpus: 20}}}]", "> cluster capacity 16"),
    ("queues: [{name: a}]\npartitions: [{name: p, nodes: [n1], queues: [ghost]}]", "unknown queue 'ghost'"),
    ("queues: [{name: a}]\ndefault_queue: ghost", "not a leaf queue"),
    ("queues: [{name: a}, {name: a}]", "duplicate queue names"),
    ("queues: [{name: a, gpus: 3}]", "unknown field"),
    # a window that over-commits the parent at night only
    ("queues: [{name: p, guaranteed: {'*': {gpus: 10}}}, {name: a, parent: p, guaranteed: {'*': {gpus: 6}},"
     " windows: [{start: '20:00', end: '06:00', guaranteed: {'*': {gpus: 12}}}]}]", "(window 20:00-06:00)"),
    ("queues: [{name: a, windows: [{start: '25:00', end: '06:00'}]}]", "windows[0].start"),
    ("queues: [", "not YAML/JSON"),
])
def test_bad_trees_are_refused_with_the_reason(text, reason):
    with pytest.raises(QuotaConfigError) as err:
        validate(text)
    assert reason in str(err.value)


def test_resolve_defaults_and_refuses_unknown():
    tree = validate(GOOD)
    assert tree.resolve("genomics") == ("genomics", "")
    leaf, why = tree.resolve("default")
    assert leaf == "misc" and "defaulted" in why
    assert tree.resolve("nope")[0] is None and "queue_unknown" in tree.resolve("nope")[1]
    assert tree.resolve("research")[0] is None  # not a leaf
    no_default = validate("queues: [{name: a}]")
    assert no_default.resolve("")[0] is None


def test_load_config_round_trips_json(tmp_path):
    p = tmp_path / "q.json"
    p.write_text('{"queues": [{"name": "a", "weight": 2}]}')
    assert load_config(p).queues[0].weight == 2


def test_open_queues_accept_any_name_unlimited():
    from gpuaware.quota import Demand, QuotaLedger
    tree = validate("open_queues: true\ndefault_queue: default\nqueues: [{name: default}]")
    assert tree.resolve("team-x") == ("team-x", "")
    ledger = QuotaLedger(tree)
    a = ledger.admit("team-y", Demand.of(gpus=64, gpu_milli=64000), now=0)
    assert a.admitted and tree.tenant["team-y"] == "team-y"
    assert validate("queues: [{name: a}]").resolve("team-x")[0] is None
