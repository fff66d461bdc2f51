"""The registry is complete and consistent: every subject constant is registered once, named by the
rules, and tagged like its Struct; the package depends on msgspec and the standard library only."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import sys
from pathlib import Path

import msgspec
import pytest

import gpuaware.schemas as pkg
from gpuaware.schemas import (
    ENDPOINT_RE,
    EVENT_SUBJECT_RE,
    MESSAGES,
    OPERATIONAL_ENDPOINTS,
    REQUESTS,
    Event,
    GpuSampled,
    PodPending,
    Reply,
    Request,
    base_subject,
    endpoint_for,
    struct_for,
    subject_of,
)

MODULES = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__))
ALL_TYPES = [*MESSAGES.values(), *(t for pair in REQUESTS.values() for t in pair)]


# dotted word tokens starting with a letter: loose on purpose, so a misspelt subject is still found
# and then fails the strict rules; wildcards (`deadletter.>`), versions and URLs do not match
_SUBJECT_LIKE = re.compile(r"^[A-Za-z][\w-]*(\.[\w-]+)+$")


def _looks_like_subject(value: object) -> bool:
    return isinstance(value, str) and bool(_SUBJECT_LIKE.match(value))


def _subject_constants() -> list[tuple[str, str, str]]:
    """(module, NAME, value) of every subject-looking constant *defined* in a module."""
    found = []
    for name in MODULES:
        module = importlib.import_module(f"gpuaware.schemas.{name}")
        tree = ast.parse(Path(module.__file__).read_text())
        for node in tree.body:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
            for target in targets:
                if isinstance(target, ast.Name) and target.id.isupper():
                    value = getattr(module, target.id)
                    if _looks_like_subject(value):
                        found.append((name, target.id, value))
    return found


def test_every_subject_constant_is_registered_exactly_once_and_well_named() -> None:
    constants = [c for c in _subject_constants() if c[0] != "operational"]
    assert len(constants) == len(MESSAGES) + len(REQUESTS), constants
    registered = [*MESSAGES, *REQUESTS]
    for module, name, value in constants:
        assert registered.count(value) == 1, f"{module}.{name} = {value!r} registered {registered.count(value)}x"
        regex = EVENT_SUBJECT_RE if value in MESSAGES else ENDPOINT_RE
        assert regex.match(value), f"{module}.{name} = {value!r} breaks {regex.pattern}"
    values = [v for _, _, v in constants]
    assert len(set(values)) == len(values), "two constants share a subject"


def test_operational_subjects_are_well_named_endpoints_outside_the_registry() -> None:
    operational = [(name, value) for module, name, value in _subject_constants() if module == "operational"]
    served = sorted(s for subjects in OPERATIONAL_ENDPOINTS.values() for s in subjects)
    assert sorted(value for _, value in operational) == served
    for name, value in operational:
        assert ENDPOINT_RE.match(value), f"operational.{name} = {value!r} breaks {ENDPOINT_RE.pattern}"
        assert value not in MESSAGES and value not in REQUESTS, value


@pytest.mark.parametrize(
    "subject, ok",
    [
        ("telemetry.gpu.sampled.v1", True),
        ("binder.pod.bind_failed.v12", True),
        ("telemetry.gpu.sampled", False),  # no version
        ("telemetry.gpu.sampled.v0", False),  # versions start at 1
        ("Telemetry.gpu.sampled.v1", False),  # lower case only
        ("telemetry.gpu.sampled.v1.default", False),  # suffixes are routing, not the subject
    ],
)
def test_event_subject_regex(subject: str, ok: bool) -> None:
    assert bool(EVENT_SUBJECT_RE.match(subject)) is ok


@pytest.mark.parametrize("subject", sorted(MESSAGES))
def test_event_tag_is_its_subject(subject: str) -> None:
    cls = MESSAGES[subject]
    config = cls.__struct_config__
    assert issubclass(cls, Event)
    assert (config.tag_field, config.tag, config.frozen) == ("kind", subject, True)
    with pytest.raises(TypeError):  # kw_only: positional construction is refused
        cls("positional")  # type: ignore[call-arg]  # the call the test expects to fail


@pytest.mark.parametrize("endpoint", sorted(REQUESTS))
def test_request_reply_tags(endpoint: str) -> None:
    request, reply = REQUESTS[endpoint]
    assert issubclass(request, Request) and issubclass(reply, Reply)
    assert request.__struct_config__.tag == f"{endpoint}.request"
    assert reply.__struct_config__.tag == f"{endpoint}.reply"
    assert endpoint_for(endpoint) == (request, reply)


def test_class_names_are_unique() -> None:
    # AsyncAPI components and JSON Schema $defs are keyed by class name
    names = [t.__name__ for t in ALL_TYPES]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    "subject, expected",
    [
        ("telemetry.gpu.sampled.v1", GpuSampled),
        ("telemetry.gpu.sampled.v1.default.node-a", GpuSampled),  # routing suffix stripped
        ("binder.pod.pending.v1.eu-1", PodPending),
    ],
)
def test_struct_for(subject: str, expected: type) -> None:
    assert struct_for(subject) is expected


@pytest.mark.parametrize("subject", ["telemetry.gpu.sampled.v2", "quota.admit", "nope"])
def test_struct_for_unknown_subject_names_it(subject: str) -> None:
    with pytest.raises(KeyError, match=re.escape(subject)):
        struct_for(subject)


def test_subject_of_and_base_subject(samples: dict[type, msgspec.Struct]) -> None:
    for subject, cls in MESSAGES.items():
        assert subject_of(samples[cls]) == subject
    assert base_subject("quota.admit") == "quota.admit"


def test_every_message_has_a_sample(samples: dict[type, msgspec.Struct]) -> None:
    assert set(ALL_TYPES) <= set(samples), set(ALL_TYPES) - set(samples)


@pytest.mark.parametrize("module", MODULES)
def test_imports_only_msgspec_and_stdlib(module: str) -> None:
    path = Path(importlib.import_module(f"gpuaware.schemas.{module}").__file__)
    allowed = set(sys.stdlib_module_names) | {"msgspec", "__future__"}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots = [node.module or ""]
        else:
            continue
        for root in roots:
            assert root.split(".")[0] in allowed or root.startswith("gpuaware.schemas"), f"{module} imports {root}"


def test_public_api_is_reexported() -> None:
    for name in pkg.__all__:
        assert hasattr(pkg, name), name
    for module in set(MODULES) - {"generate"}:  # generate is a tool, not API
        mod = importlib.import_module(f"gpuaware.schemas.{module}")
        missing = set(getattr(mod, "__all__", ())) - set(pkg.__all__)
        assert not missing, f"{module} exports {missing} but gpuaware.schemas does not"
