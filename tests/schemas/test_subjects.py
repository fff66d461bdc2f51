"""Every name becomes exactly one subject token, distinct names distinct tokens, and a Kubernetes name's
token gives the name back: over every Kubernetes-valid name and hostile ones (property tests)."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from gpuaware.schemas import (
    CONSUMER_NAME_MAX,
    TOKEN_MAX,
    SubjectToken,
    consumer_name,
    is_consumer_name,
    is_subject_token,
    name_from_token,
    subject_matches,
    subject_token,
)

# -- names ----------------------------------------------------------------------------------------------

_ALNUM_LOWER = string.ascii_lowercase + string.digits
_ALNUM = string.ascii_letters + string.digits


@st.composite
def dns_label(draw: st.DrawFn, max_size: int = 63) -> str:
    """A DNS-1123 label: 1-63 of a-z 0-9 -, starting and ending alphanumeric."""
    size = draw(st.integers(1, max_size))
    if size == 1:
        return draw(st.sampled_from(_ALNUM_LOWER))
    inner = draw(st.text(_ALNUM_LOWER + "-", min_size=size - 2, max_size=size - 2))
    return draw(st.sampled_from(_ALNUM_LOWER)) + inner + draw(st.sampled_from(_ALNUM_LOWER))


@st.composite
def dns_subdomain(draw: st.DrawFn) -> str:
    """A DNS-1123 subdomain (a node, namespace or pod name): labels joined by dots, at most 253 characters;
    long ones are drawn often, up to exactly 253."""
    budget = draw(st.sampled_from([253, 253, 120, 63, 20]))
    labels = [draw(dns_label(min(63, budget)))]
    while len(".".join(labels)) < budget - 1 and draw(st.integers(0, 3)):
        room = budget - len(".".join(labels)) - 1
        labels.append(draw(dns_label(min(63, room))))
    return ".".join(labels)


@st.composite
def label_value(draw: st.DrawFn) -> str:
    """A Kubernetes label value (a queue, a tenant, a GPU model label): empty, or up to 63 of
    A-Z a-z 0-9 - _ . starting and ending alphanumeric."""
    size = draw(st.integers(0, 63))
    if size <= 1:
        return draw(st.text(_ALNUM, min_size=size, max_size=size))
    inner = draw(st.text(_ALNUM + "-_.", min_size=size - 2, max_size=size - 2))
    return draw(st.sampled_from(_ALNUM)) + inner + draw(st.sampled_from(_ALNUM))


GPU_UUIDS = st.uuids().map(lambda u: f"GPU-{u}")
KUBERNETES_NAMES = st.one_of(dns_subdomain(), label_value(), GPU_UUIDS)
HOSTILE = st.one_of(
    st.text(),                                                     # any unicode, empty included
    st.text(" *>.\t\n_%-+$/\\", max_size=12),                      # what NATS or the escape treat specially
    st.text(st.characters(codec="utf-8"), min_size=200, max_size=400),  # long and wide: hashed
    st.sampled_from(["*", ">", ".", "..", " ", "a b", "a*b", "a>", "$SYS", "%", "%41", "_", "é", "名前", "🚀"]),
)
ANY_NAME = st.one_of(KUBERNETES_NAMES, HOSTILE)

NATS_TOKEN = re.compile(r"^[^.\s*>]+$")
"""what nats-server accepts as one literal token: no dot, no whitespace, not a wildcard"""


def _is_kubernetes_name(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9._-]{0,253}", name))


# -- tokens ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, token", [
    ("gpu-node-1", "gpu-node-1"),
    ("ip-10-0-1-2.ec2.internal", "ip-10-0-1-2_ec2_internal"),   # dots: readable, as before
    ("prod.eu-west-1", "prod_eu-west-1"),
    ("GPU-3f2a9c1e-0000-0000-0000-000000000000", "GPU-3f2a9c1e-0000-0000-0000-000000000000"),
    ("team_a", "team%5Fa"),                                       # '_' is escaped: it stands for '.'
    ("NVIDIA A100-SXM4-80GB", "NVIDIA%20A100-SXM4-80GB"),
    ("a b*c>d", "a%20b%2Ac%3Ed"),
    ("é", "%C3%A9"),
    ("", "%"),
])
def test_subject_token(name: str, token: str) -> None:
    assert subject_token(name) == token
    assert name_from_token(token) == name


def test_a_dotted_node_name_is_one_token_under_a_wildcard() -> None:
    subject = f"telemetry.gpu.sampled.v1.{subject_token('prod.eu')}.{subject_token('n1.example.com')}"
    assert subject_matches("telemetry.gpu.sampled.v1.*.*", subject)


def test_names_the_old_rule_confused_get_different_tokens() -> None:
    names = ["a.b", "a_b", "a b", "a*b", "a>b", "a%2Eb", "a%5Fb"]
    assert len({subject_token(n) for n in names}) == len(names)


def test_a_token_is_not_escaped_twice() -> None:
    token = subject_token("ip-10-0-1-2.ec2.internal")
    assert isinstance(token, SubjectToken)
    assert subject_token(token) is token
    assert subject_token(str(token)) != token  # a plain str is a name: '_' is escaped


@given(KUBERNETES_NAMES)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@example("a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61)  # 253 characters
def test_every_kubernetes_name_is_one_reversible_token(name: str) -> None:
    assert _is_kubernetes_name(name)
    token = subject_token(name)
    assert is_subject_token(token) and NATS_TOKEN.match(token)
    assert name_from_token(token) == name


@given(ANY_NAME)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_every_name_is_one_valid_token(name: str) -> None:
    token = subject_token(name)
    assert is_subject_token(token) and NATS_TOKEN.match(token) and len(token) <= TOKEN_MAX
    assert subject_matches("telemetry.gpu.sampled.v1.*.*", f"telemetry.gpu.sampled.v1.{token}.{token}")
    assert is_consumer_name(token)


@given(ANY_NAME)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_a_token_is_reversible_unless_hashed(name: str) -> None:
    token = subject_token(name)
    size = len(name.encode("utf-8", "surrogatepass"))
    if "%-" in token:  # hashed: only a name whose escaped form (1 or 3 characters a byte) is too long
        assert 3 * size > TOKEN_MAX and TOKEN_MAX - 2 <= len(token) <= TOKEN_MAX
        with pytest.raises(ValueError, match="hashed"):
            name_from_token(token)
    else:
        assert size <= TOKEN_MAX and name_from_token(token) == name


@given(ANY_NAME, ANY_NAME)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_distinct_names_have_distinct_tokens(a: str, b: str) -> None:
    assume(a != b)
    assert subject_token(a) != subject_token(b)


@given(st.text(min_size=300, max_size=400).flatmap(lambda head: st.tuples(st.just(head), st.text(max_size=5))))
def test_long_names_sharing_a_head_have_distinct_hashed_tokens(head_tail: tuple[str, str]) -> None:
    head, tail = head_tail
    assert subject_token(head + tail + "x") != subject_token(head + tail + "y")


@pytest.mark.parametrize("token", ["", "a.b", "a b", "*", ">", "%4", "%4g", "%41", "%2e", "a~b", "%C3", "é"])
def test_what_the_rule_never_makes_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="invalid subject token"):
        name_from_token(token)


# -- consumer names -------------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix, names, expected", [
    ("placement", ("prod.eu-west-1",), "placement-prod_eu-west-1"),
    ("health-scoring", ("default",), "health-scoring-default"),
    ("telemetry-agent", ("node-0", "node-1"), "telemetry-agent-node-0+node-1"),
    ("binder", (), "binder"),
])
def test_consumer_name(prefix: str, names: tuple[str, ...], expected: str) -> None:
    assert consumer_name(prefix, *names) == expected


@pytest.mark.parametrize("prefix", ["", "a.b", "a b", "a*", "a>", "a/b", "a\\b", "x" * 256])
def test_a_consumer_name_prefix_is_checked(prefix: str) -> None:
    with pytest.raises(ValueError, match="cannot start a consumer name"):
        consumer_name(prefix, "n")


@given(st.lists(ANY_NAME, min_size=1, max_size=4))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_every_consumer_name_is_valid(names: list[str]) -> None:
    name = consumer_name("telemetry-agent", *names)
    assert is_consumer_name(name) and len(name) <= CONSUMER_NAME_MAX
    assert not re.search(r"[.*>/\\\s]", name)


@given(st.lists(ANY_NAME, min_size=1, max_size=3), st.lists(ANY_NAME, min_size=1, max_size=3))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@example(["a-b", "c"], ["a", "b-c"])
@example(["a.b"], ["a_b"])
def test_distinct_lists_of_names_have_distinct_consumer_names(a: list[str], b: list[str]) -> None:
    assume(a != b)
    assert consumer_name("telemetry-agent", *a) != consumer_name("telemetry-agent", *b)
